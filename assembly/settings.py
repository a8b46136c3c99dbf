"""The settings of an egbe process: the chassis settings and every service's own, in one model.

One model, so that an unknown key anywhere (file, environment, argument) is refused with a
suggestion drawn from every key any service knows, and one file configures any process.
"""

from __future__ import annotations

from typing import Any

from biography_service.config import BiographyServiceSettings
from cognition_service.config import CognitionServiceSettings
from console.config import ConsoleSettings
from edge.config import EdgeServiceSettings
from gateway.config import GatewayServiceSettings
from kernel_service.config import KernelServiceSettings
from policy_service.config import PolicyServiceSettings
from services.settings import build_settings


class EgbeSettings(
    KernelServiceSettings,
    GatewayServiceSettings,
    CognitionServiceSettings,
    PolicyServiceSettings,
    BiographyServiceSettings,
    EdgeServiceSettings,
    ConsoleSettings,
):
    """Everything any service process needs to start; each field documents itself."""


def load_settings(**overrides: Any) -> EgbeSettings:
    """Build settings with the documented precedence; explicit overrides win.

    Raises UserError for an unknown key, a value out of range, bad TOML or a missing config file."""
    return build_settings(EgbeSettings, **overrides)
