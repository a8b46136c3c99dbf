"""The game-engine boundary from another language: the C++ world client (clients/cpp), built from
protos/ with Debian's gRPC C++ packages, against real `egbe up` processes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, EmbeddedEgbe, start_embedded, stop_embedded

CLIENT = ROOT / "build" / "cpp" / "egbe-world-client"


@pytest.fixture(scope="session")
def world_client() -> Path:
    """Builds the client (incrementally; `make cpp-client` builds it in CI before the tests)."""
    build = subprocess.run(
        ["make", "-C", str(ROOT / "clients" / "cpp")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return CLIENT


def run_client(client: Path, target: str, token: str, *extra: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(
        [str(client), "--target", target, "--token", token, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout.strip().splitlines()[-1])


def test_wrong_role_and_unknown_token_are_refused(world_client: Path, embedded_egbe: EmbeddedEgbe) -> None:
    target = embedded_egbe.targets["kernel"]
    code, answer = run_client(world_client, target, embedded_egbe.tokens["operator"])
    assert (code, answer["rpc"], answer["code"]) == (3, "RegisterAgents", "PERMISSION_DENIED")
    code, answer = run_client(world_client, target, "an-unknown-token-of-length")
    assert (code, answer["code"]) == (3, "UNAUTHENTICATED")


def test_client_dials_through_mtls(
    world_client: Path, mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path]
) -> None:
    """Over mTLS the call reaches the kernel's own authorization (so the handshake succeeded)."""
    tls = ["--ca", str(certificates["ca"]), "--cert", str(certificates["client_cert"])]
    tls += ["--key", str(certificates["client_key"])]
    code, answer = run_client(world_client, mtls_egbe.targets["kernel"], mtls_egbe.tokens["operator"], *tls)
    assert (code, answer["code"]) == (3, "PERMISSION_DENIED")
    no_cert = ["--ca", str(certificates["ca"])]
    code, answer = run_client(world_client, mtls_egbe.targets["kernel"], mtls_egbe.tokens["world"], *no_cert)
    assert (code, answer["code"]) == (3, "UNAVAILABLE")


@pytest.fixture(scope="module")
def fresh_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    """Its own `egbe up`: a kernel serves one world, the first one registered."""
    egbe = start_embedded(tmp_path_factory.mktemp("egbe-cpp-world"))
    yield egbe
    assert stop_embedded(egbe) == 0


def test_registers_streams_row_and_columnar_ticks_and_checks_every_answer(
    world_client: Path, fresh_kernel: EmbeddedEgbe
) -> None:
    target, token = fresh_kernel.targets["kernel"], fresh_kernel.tokens["world"]
    code, answer = run_client(world_client, target, token, "--agents", "256", "--ticks", "40")
    assert code == 0, answer
    assert answer["ok"] is True
    assert answer["registered_total"] == 256
    assert (answer["row_ticks"], answer["columnar_ticks"]) == (20, 20)
    assert answer["backwards_tick"] == "INVALID_ARGUMENT"
