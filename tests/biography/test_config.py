"""The biography's limits are reachable from EgbeSettings (env and TOML), one source of truth each."""

from __future__ import annotations

import pytest

from assembly.settings import load_settings
from biography_service.config import BiographyConfig


def test_environment_reaches_the_biography_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_BIOGRAPHY__MAX_BATCH_EVENTS", "7")
    settings = load_settings()
    assert settings.biography.max_batch_events == 7
    assert settings.biography.max_payload_bytes == BiographyConfig().max_payload_bytes


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch_events"):
        BiographyConfig(max_batch_events=0)
