"""deploy/compose.yaml and its secrets script: every service its own container, settings that load,
tokens from a secrets file. (No Docker engine runs in CI, so the stack itself is not started here.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from assembly.settings import EgbeSettings, load_settings
from services.auth import Role, TokenStore
from services.settings import SERVICE_NAMES
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _settings_of(service: dict[str, Any]) -> EgbeSettings:
    with pytest.MonkeyPatch.context() as env:
        for key, value in service["environment"].items():
            if key.startswith("EGBE_") and value is not None:
                env.setenv(key, str(value))
        return load_settings()


def test_every_service_is_its_own_container_from_the_one_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in SERVICE_NAMES:
        service = services[name]
        assert service["command"] == ["serve", name]
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == (
            DEPLOY / "Dockerfile"
        )
        assert service["read_only"] is True
        assert service["cap_drop"] == ["ALL"]
    assert services["postgres"]["healthcheck"]["test"][1] == "pg_isready"


def test_each_container_listens_on_all_interfaces_and_dials_the_others_by_name(
    compose: dict[str, Any],
) -> None:
    for name in SERVICE_NAMES:
        settings = _settings_of(compose["services"][name])
        assert settings.mode.value == "production"
        for other, endpoint in settings.endpoints.items():
            expected_host = "0.0.0.0" if other == name else other  # noqa: S104
            assert endpoint.host == expected_host, (name, other)
            assert endpoint.port == EgbeSettings().endpoints[other].port


def test_the_kernel_dials_the_gateway_biography_and_policy_containers(compose: dict[str, Any]) -> None:
    settings = _settings_of(compose["services"]["kernel"])
    assert settings.kernel.gateway_target == settings.endpoints["gateway"].target() == "gateway:50052"
    assert settings.kernel.biography_target == settings.endpoints["biography"].target() == "biography:50055"
    assert settings.kernel.policy_target == settings.endpoints["policy"].target() == "policy:50054"


def test_the_services_read_the_tokens_through_the_secrets_group(compose: dict[str, Any]) -> None:
    for name in ("kernel", "gateway", "cognition", "policy", "biography"):
        assert compose["services"][name]["group_add"] == [
            "${EGBE_SECRETS_GID:?run deploy/make-compose-secrets.sh first}"
        ]


def test_tokens_come_from_the_secrets_file(compose: dict[str, Any]) -> None:
    secret_file = compose["secrets"]["egbe_tokens"]["file"]
    for name in SERVICE_NAMES:
        service = compose["services"][name]
        assert "egbe_tokens" in service["secrets"]
        assert service["environment"]["EGBE_TOKENS_FILE"] == "/run/secrets/egbe_tokens"
    assert secret_file == "secrets/tokens.json"


def test_only_the_gateway_sees_the_model_key(compose: dict[str, Any]) -> None:
    holders = {n for n, s in compose["services"].items() if "ANTHROPIC_API_KEY" in s.get("environment", {})}
    assert holders == {"gateway"}


def test_healthy_dependencies_have_health_checks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    image_has_healthcheck = "HEALTHCHECK" in (DEPLOY / "Dockerfile").read_text()
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency] or (
                    services[dependency].get("image") == "egbe:dev" and image_has_healthcheck
                ), (name, dependency)


def test_the_demo_runs_against_the_containers(compose: dict[str, Any]) -> None:
    demo = compose["services"]["demo"]
    assert demo["profiles"] == ["demo"]
    assert demo["command"] == ["demo", "--target", "compose"]


def test_secrets_script_makes_tokens_the_services_accept(tmp_path: Path) -> None:
    script = tmp_path / "deploy" / "make-compose-secrets.sh"
    script.parent.mkdir()
    shutil.copy(DEPLOY / "make-compose-secrets.sh", script)
    for _ in range(2):  # a second run keeps what exists
        subprocess.run(["sh", str(script)], check=True, capture_output=True, timeout=60)
    secrets = script.parent / "secrets"
    tokens = TokenStore.load(secrets / "tokens.json")
    assert len({tokens.token_for(role) for role in Role}) == len(Role)
    assert (secrets.stat().st_mode & 0o777) == 0o700
    # Group-readable only, and the containers join that group: a production service accepts it when it
    # runs as another user (uid 10001 in the image), never when others can read it.
    assert (secrets / "tokens.json").stat().st_mode & 0o777 == 0o640
    env = (script.parent / ".env").read_text()
    assert env == f"EGBE_SECRETS_GID={(secrets / 'tokens.json').stat().st_gid}\n"
    assert (secrets / "egbe.env").stat().st_mode & 0o077 == 0
    lines = dict(line.split("=", 1) for line in (secrets / "egbe.env").read_text().splitlines())
    assert lines["EGBE_DATABASE_URL"] == f"postgresql://egbe:{lines['POSTGRES_PASSWORD']}@postgres:5432/egbe"


def test_the_edge_is_its_own_container_forwarding_to_the_others_without_secrets(
    compose: dict[str, Any],
) -> None:
    edge = compose["services"]["edge"]
    assert edge["command"] == ["edge"]
    assert (edge["read_only"], edge["cap_drop"]) == (True, ["ALL"])
    assert (edge["secrets"], edge["env_file"], edge["group_add"]) == ([], [], [])
    settings = _settings_of(edge)
    assert (settings.edge.host, settings.edge.port) == ("0.0.0.0", 50057)  # noqa: S104
    assert edge["ports"] == [f"127.0.0.1:{settings.edge.port}:{settings.edge.port}"]
    for name in SERVICE_NAMES:
        assert settings.endpoints[name].target() == f"{name}:{EgbeSettings().endpoints[name].port}"
    assert f"{settings.edge.port}/healthz" in edge["healthcheck"]["test"][-1]
