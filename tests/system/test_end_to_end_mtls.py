"""The hamlet end to end with every hop over mTLS: world → kernel → gateway → cognition → policy and
biography, each a TCP connection that presents and checks certificates made for this test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.local_cluster import free_ports
from services.settings import SERVICE_NAMES
from tests.conftest import ROOT, EmbeddedEgbe, start_embedded, stop_embedded
from tests.tls_fixtures import tls_env


@pytest.fixture(scope="module")
def fixed_ports() -> dict[str, str]:
    ports = dict(zip(SERVICE_NAMES, free_ports(len(SERVICE_NAMES)), strict=True))
    env = {f"EGBE_ENDPOINTS__{name.upper()}__PORT": str(port) for name, port in ports.items()}
    env["EGBE_KERNEL__GATEWAY_TARGET"] = f"127.0.0.1:{ports['gateway']}"
    env["EGBE_KERNEL__BIOGRAPHY_TARGET"] = f"127.0.0.1:{ports['biography']}"
    return env


@pytest.fixture(scope="module")
def mtls_services(
    certificates: dict[str, Path], fixed_ports: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedEgbe]:
    server_tls = tls_env("mtls", certificates["ca"], certificates["server_cert"], certificates["server_key"])
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**fixed_ports, **server_tls}.items():
            env.setenv(name, value)
        egbe = start_embedded(tmp_path_factory.mktemp("egbe-e2e-mtls"), ephemeral_ports=False)
    yield egbe
    assert stop_embedded(egbe) == 0


def test_hamlet_runs_end_to_end_over_mtls(
    mtls_services: EmbeddedEgbe,
    certificates: dict[str, Path],
    fixed_ports: dict[str, str],
    tmp_path: Path,
) -> None:
    client_tls = tls_env("mtls", certificates["ca"], certificates["client_cert"], certificates["client_key"])
    result = subprocess.run(
        [
            *(sys.executable, "-m", "assembly.cli", "--data-dir", str(mtls_services.data_dir)),
            *("demo", "--target", "running", "--reduced-time", "--quiet", "--runs-dir", str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/bin:/bin", **fixed_ports, **client_tls},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Not an embedded fallback of its own on unix sockets: it used the mTLS services.
    assert "using the running Egbe services" in result.stderr

    (artifact_file,) = tmp_path.glob("*/artifact.json")
    artifact = json.loads(artifact_file.read_text())
    assert artifact["answered_by"] == "offline"
    # Kernel → gateway (dispatcher), gateway → cognition, cognition → gateway: the ledger was charged.
    assert artifact["bill"]["consumed_tokens"] > 0
    assert sum(tier["calls"] for tier in artifact["bill"]["by_tier"]) > 0
    # Cognition → biography: events were appended.
    assert sum(biography["events"] for biography in artifact["biographies"]) > 0

    served = [
        json.loads(line)
        for line in (mtls_services.data_dir / "egbe-up.log").read_text().splitlines()
        if '"service serving"' in line
    ]
    assert {entry["service"] for entry in served} == set(SERVICE_NAMES)
    assert {entry["transport"] for entry in served} == {"mtls"}
