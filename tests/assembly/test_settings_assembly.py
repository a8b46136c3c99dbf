"""The assembled settings are the chassis settings plus each service's own key; a service's settings
class knows its own key alone, and an unknown key is refused with a suggestion drawn from every key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from assembly.settings import EgbeSettings, load_settings
from biography_service.config import BiographyServiceSettings
from cognition_service.config import CognitionServiceSettings
from console.config import ConsoleSettings
from edge.config import EdgeServiceSettings
from gateway.config import GatewayServiceSettings
from kernel_service.config import KernelServiceSettings
from policy_service.config import PolicyServiceSettings
from services.settings import SERVICE_NAMES, ChassisSettings, UserError, build_settings

SERVICE_SETTINGS = {
    "kernel": KernelServiceSettings,
    "gateway": GatewayServiceSettings,
    "cognition": CognitionServiceSettings,
    "policy": PolicyServiceSettings,
    "biography": BiographyServiceSettings,
}

# What `egbe up` serves beside the five services, each with its key.
BESIDE_SETTINGS = {"edge": EdgeServiceSettings, "console": ConsoleSettings}


def test_the_assembly_is_the_chassis_and_each_services_key() -> None:
    assert tuple(SERVICE_SETTINGS) == SERVICE_NAMES
    chassis = set(ChassisSettings.model_fields)
    assert not chassis & set(SERVICE_NAMES)
    assert set(EgbeSettings.model_fields) == chassis | set(SERVICE_NAMES) | set(BESIDE_SETTINGS)
    for name, settings_cls in {**SERVICE_SETTINGS, **BESIDE_SETTINGS}.items():
        assert set(settings_cls.model_fields) == chassis | {name}
        assert issubclass(EgbeSettings, settings_cls)


@pytest.mark.parametrize("name", SERVICE_NAMES)
def test_a_services_settings_refuse_another_services_key(name: str) -> None:
    other = next(n for n in SERVICE_NAMES if n != name)
    with pytest.raises(ValidationError) as refused:
        SERVICE_SETTINGS[name](**{other: {}})
    assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [("extra_forbidden", (other,))]


def test_the_chassis_alone_suggests_only_its_own_keys() -> None:
    with pytest.raises(UserError) as chassis:
        build_settings(ChassisSettings, gatway={})
    unknown = "argument: unknown key gatway; remove it (docs/configuration.md lists every key)"
    assert str(chassis.value) == unknown
    with pytest.raises(UserError) as assembled:
        load_settings(gatway={})
    assert str(assembled.value) == "argument: unknown key gatway; did you mean gateway?"
