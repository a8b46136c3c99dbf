"""`egbe up` over mTLS with certificates made here: health and an authorized call work; no cert, no call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from assembly.settings import EgbeSettings, load_settings
from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from services.channels import client_credentials, open_blocking_channel, open_channel
from services.settings import TlsMode, TlsSettings
from tests.conftest import ROOT, EmbeddedEgbe
from tests.tls_fixtures import tls_env


def _client_settings(certificates: dict[str, Path], identity: str | None) -> EgbeSettings:
    if identity is None:
        return load_settings(tls=TlsSettings(mode=TlsMode.TLS, ca_file=certificates["ca"]))
    return load_settings(
        tls=TlsSettings(
            mode=TlsMode.MTLS,
            ca_file=certificates["ca"],
            cert_file=certificates[f"{identity}_cert"],
            key_file=certificates[f"{identity}_key"],
        )
    )


def _budget_request() -> gateway_pb2.EvaluateBudgetRequest:
    return gateway_pb2.EvaluateBudgetRequest(
        requests=[
            gateway_pb2.BudgetRequest(
                ori_id="ori-1",
                tier=common_pb2.COGNITION_TIER_CLOTHO,  # type: ignore[arg-type]
                requested_tokens=1_000,
            )
        ]
    )


async def test_health_and_an_authorized_call_work_over_mtls(
    mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path]
) -> None:
    settings = _client_settings(certificates, "client")
    for name, target in mtls_egbe.targets.items():
        async with open_channel(target, settings) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
    async with open_channel(mtls_egbe.targets["gateway"], settings) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        answer = await stub.EvaluateBudget(
            _budget_request(), metadata=bearer_metadata(mtls_egbe.tokens["service"]), timeout=10
        )
    assert answer.allocations[0].allowed_tokens == 1_000
    with open_blocking_channel(mtls_egbe.targets["kernel"], settings) as blocking:
        reply = health_pb2_grpc.HealthStub(blocking).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_certificate_does_not_replace_the_token(
    mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path]
) -> None:
    async with open_channel(
        mtls_egbe.targets["gateway"], _client_settings(certificates, "client")
    ) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.EvaluateBudget(_budget_request(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("identity", [None, "rogue"], ids=["no-client-cert", "cert-from-another-ca"])
async def test_client_without_a_trusted_certificate_is_refused(
    mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path], identity: str | None
) -> None:
    settings = _client_settings(certificates, identity)
    async with open_channel(mtls_egbe.targets["gateway"], settings) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.EvaluateBudget(
                _budget_request(), metadata=bearer_metadata(mtls_egbe.tokens["service"]), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake fails; no RPC runs


async def test_plaintext_client_is_refused(mtls_egbe: EmbeddedEgbe) -> None:
    async with grpc.aio.insecure_channel(mtls_egbe.targets["gateway"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_server_with_a_certificate_from_another_ca_is_not_trusted(
    mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path]
) -> None:
    """A client verifies the server too: trusting only a different CA, it refuses to talk."""
    foreign = TlsSettings(
        mode=TlsMode.MTLS,
        ca_file=certificates["rogue_cert"].parent / "ca.pem",
        cert_file=certificates["rogue_cert"],
        key_file=certificates["rogue_key"],
    )
    target = mtls_egbe.targets["gateway"]
    async with grpc.aio.secure_channel(target, client_credentials(foreign)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def _egbe_cli(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_egbe_health_and_probe_dial_through_mtls(
    mtls_egbe: EmbeddedEgbe, certificates: dict[str, Path]
) -> None:
    client_env = tls_env("mtls", certificates["ca"], certificates["client_cert"], certificates["client_key"])
    health = _egbe_cli(mtls_egbe.data_dir, client_env, "health", "--timeout", "10")
    assert health.returncode == 0, health.stdout + health.stderr
    assert all(line.split()[1] == "SERVING" for line in health.stdout.strip().splitlines())
    probe = _egbe_cli(mtls_egbe.data_dir, client_env, "probe", "--timeout", "10")
    assert probe.returncode == 0, probe.stdout + probe.stderr

    no_cert_env = tls_env("tls", certificates["ca"], None, None)
    refused = _egbe_cli(mtls_egbe.data_dir, no_cert_env, "health", "--service", "gateway", "--timeout", "3")
    assert refused.returncode == 1
    assert "UNREACHABLE: UNAVAILABLE" in refused.stdout
