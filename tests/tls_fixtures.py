"""Certificates made for the test run, and an `egbe up` serving mTLS with them (a pytest plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.make_dev_certs import issue_ca, issue_certificate
from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded

__all__ = ["certificates", "mtls_egbe", "tls_env"]


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("certs")
    ca_file, ca_key = issue_ca(out)
    server = issue_certificate(out, "egbe-services", ca_file, ca_key)
    client = issue_certificate(out, "operator-console", ca_file, ca_key)
    rogue_ca, rogue_key = issue_ca(out / "rogue", "someone else's CA")
    rogue = issue_certificate(out / "rogue", "intruder", rogue_ca, rogue_key)
    return {
        "ca": ca_file,
        "server_cert": server.cert_file,
        "server_key": server.key_file,
        "client_cert": client.cert_file,
        "client_key": client.key_file,
        "rogue_cert": rogue.cert_file,
        "rogue_key": rogue.key_file,
    }


def tls_env(mode: str, ca: Path, cert: Path | None, key: Path | None) -> dict[str, str]:
    env = {"EGBE_TLS__MODE": mode, "EGBE_TLS__CA_FILE": str(ca)}
    if cert is not None and key is not None:
        env |= {"EGBE_TLS__CERT_FILE": str(cert), "EGBE_TLS__KEY_FILE": str(key)}
    return env


@pytest.fixture(scope="session")
def mtls_egbe(
    certificates: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedEgbe]:
    with pytest.MonkeyPatch.context() as env:
        server_env = tls_env(
            "mtls", certificates["ca"], certificates["server_cert"], certificates["server_key"]
        )
        for name, value in server_env.items():
            env.setenv(name, value)
        egbe = start_embedded(tmp_path_factory.mktemp("egbe-mtls"))
    yield egbe
    assert stop_embedded(egbe) == 0
