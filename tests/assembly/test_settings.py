"""Settings precedence: defaults < TOML file < EGBE_* environment < explicit arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembly.settings import load_settings
from services.settings import Mode, UserError


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "egbe.toml"
    path.write_text('log_level = "debug"\nmode = "production"\n[endpoints.kernel]\nport = 7000\n')
    return path


def test_defaults_when_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EGBE_LOG_LEVEL", raising=False)
    settings = load_settings()
    assert settings.mode is Mode.EMBEDDED
    assert settings.log_level == "info"
    assert settings.endpoints["kernel"].port == 50051
    assert settings.endpoints["biography"].port == 50055


def test_toml_file_overrides_defaults(config_file: Path) -> None:
    settings = load_settings(config_file=config_file)
    assert settings.log_level == "debug"
    assert settings.mode is Mode.PRODUCTION
    assert settings.endpoints["kernel"].port == 7000
    assert settings.endpoints["gateway"].port == 50052  # untouched entries keep their defaults


def test_environment_overrides_toml(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_LOG_LEVEL", "warning")
    monkeypatch.setenv("EGBE_ENDPOINTS__KERNEL__PORT", "7100")
    settings = load_settings(config_file=config_file)
    assert settings.log_level == "warning"
    assert settings.endpoints["kernel"].port == 7100
    assert settings.mode is Mode.PRODUCTION


def test_config_file_named_by_environment(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_CONFIG_FILE", str(config_file))
    assert load_settings().log_level == "debug"


def test_explicit_arguments_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_LOG_LEVEL", "warning")
    assert load_settings(log_level="error").log_level == "error"


def test_unknown_setting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("no_such_setting = 1\n")
    with pytest.raises(UserError) as refused:
        load_settings(config_file=path)
    assert str(refused.value) == (
        f"config file {path}: unknown key no_such_setting; remove it (docs/configuration.md lists every key)"
    )


def test_unknown_service_endpoint_is_refused() -> None:
    with pytest.raises(UserError) as refused:
        load_settings(endpoints={"warpdrive": {"port": 1}})
    assert str(refused.value) == (
        "argument: endpoints: unknown service name(s) ['warpdrive']; "
        "expected ['kernel', 'gateway', 'cognition', 'policy', 'biography']"
    )


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist; name an existing TOML file"):
        load_settings(config_file=tmp_path / "absent.toml")


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("log_level = \n")
    with pytest.raises(UserError, match=r"not valid TOML: Invalid value \(at line 1, column 13\)"):
        load_settings(config_file=path)
