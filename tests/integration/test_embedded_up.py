"""`egbe up` as a subprocess: health on every service, reflection, auth, and error statuses over real gRPC."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, kernel_pb2, kernel_pb2_grpc
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.conftest import ROOT, EmbeddedEgbe, start_embedded, stop_embedded

EXPECTED_SERVICES = {
    "kernel": {"egbe.v1.KernelService"},
    "gateway": {"egbe.v1.CognitionGatewayService", "egbe.v1.OperatorService"},
    "cognition": {"egbe.v1.CognitionService"},
    "policy": {"egbe.v1.PolicyService"},
    "biography": {"egbe.v1.BiographyService"},
}


@pytest.fixture
async def gateway_channel(embedded_egbe: EmbeddedEgbe) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        yield channel


async def test_every_service_is_serving(embedded_egbe: EmbeddedEgbe) -> None:
    assert set(embedded_egbe.targets) == set(EXPECTED_SERVICES)
    for name, target in embedded_egbe.targets.items():
        async with grpc.aio.insecure_channel(target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ["", *EXPECTED_SERVICES[name]]:
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, (name, service)


async def test_reflection_lists_each_services_api(embedded_egbe: EmbeddedEgbe) -> None:
    for name, target in embedded_egbe.targets.items():
        async with grpc.aio.insecure_channel(target) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            async for reply in stub.ServerReflectionInfo(iter([request])):
                listed = {s.name for s in reply.list_services_response.service}
                assert EXPECTED_SERVICES[name] <= listed
                assert "grpc.health.v1.Health" in listed


def test_egbe_health_command_reports_every_service(embedded_egbe: EmbeddedEgbe) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(embedded_egbe.data_dir), "health"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [[name, "SERVING"] for name in EXPECTED_SERVICES]


def test_egbe_health_fails_when_nothing_serves(tmp_path: Path) -> None:
    env_ports = {f"EGBE_ENDPOINTS__{n.upper()}__PORT": "1" for n in EXPECTED_SERVICES}
    result = subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(tmp_path), "health", "--timeout", "0.5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**env_ports, "PATH": "/usr/bin"},
    )
    assert result.returncode == 1
    assert "UNREACHABLE" in result.stdout


def _budget_request(tier: int = common_pb2.COGNITION_TIER_CLOTHO) -> gateway_pb2.EvaluateBudgetRequest:
    return gateway_pb2.EvaluateBudgetRequest(
        requests=[gateway_pb2.BudgetRequest(ori_id="ori-1", tier=tier, requested_tokens=60_000)]  # type: ignore[arg-type]
    )


async def test_call_without_token_is_unauthenticated(gateway_channel: grpc.aio.Channel) -> None:
    stub = gateway_pb2_grpc.CognitionGatewayServiceStub(gateway_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluateBudget(_budget_request())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_call_with_wrong_token_is_unauthenticated(gateway_channel: grpc.aio.Channel) -> None:
    stub = gateway_pb2_grpc.CognitionGatewayServiceStub(gateway_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluateBudget(_budget_request(), metadata=bearer_metadata("not-a-real-token-at-all"))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_call_with_wrong_role_is_permission_denied(
    embedded_egbe: EmbeddedEgbe, gateway_channel: grpc.aio.Channel
) -> None:
    stub = gateway_pb2_grpc.OperatorServiceStub(gateway_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.KillOri(
            gateway_pb2.KillOriRequest(ori_id="ori-1"),
            metadata=bearer_metadata(embedded_egbe.tokens["world"]),
        )
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with grpc.aio.insecure_channel(embedded_egbe.targets["kernel"]) as channel:
        kernel = kernel_pb2_grpc.KernelServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await kernel.Tick(
                kernel_pb2.TickRequest(), metadata=bearer_metadata(embedded_egbe.tokens["operator"])
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_right_role_gets_an_answer(
    embedded_egbe: EmbeddedEgbe, gateway_channel: grpc.aio.Channel
) -> None:
    stub = gateway_pb2_grpc.CognitionGatewayServiceStub(gateway_channel)
    reply = await stub.EvaluateBudget(
        _budget_request(), metadata=bearer_metadata(embedded_egbe.tokens["service"])
    )
    assert reply.allocations[0].tier_capped_tokens == 50_000
    assert reply.allocations[0].over_tier_budget
    assert reply.world_cap_tokens == 96_000_000


async def test_malformed_request_gets_invalid_argument_with_field_violation(
    embedded_egbe: EmbeddedEgbe, gateway_channel: grpc.aio.Channel
) -> None:
    stub = gateway_pb2_grpc.CognitionGatewayServiceStub(gateway_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluateBudget(
            _budget_request(tier=common_pb2.COGNITION_TIER_UNSPECIFIED),
            metadata=bearer_metadata(embedded_egbe.tokens["service"]),
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert [v.field for v in field_violations(status)] == ["requests[0].tier"]


def test_sigterm_drains_and_exits_cleanly(tmp_path: Path) -> None:
    egbe = start_embedded(tmp_path)
    assert stop_embedded(egbe) == 0
    assert not (tmp_path / "endpoints.json").exists()


async def test_biography_serves_from_sqlite_under_the_data_dir(embedded_egbe: EmbeddedEgbe) -> None:
    from egbe.v1 import biography_pb2, biography_pb2_grpc

    async with grpc.aio.insecure_channel(embedded_egbe.targets["biography"]) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)
        report = await stub.VerifyChain(
            biography_pb2.VerifyChainRequest(ori_id="ori-1"),
            metadata=bearer_metadata(embedded_egbe.tokens["service"]),
        )
    assert report.intact
    assert report.events_checked == 0
    assert (embedded_egbe.data_dir / "biography.sqlite3").is_file()


async def test_up_serves_on_unix_sockets(tmp_path: Path) -> None:
    egbe = start_embedded(tmp_path / "data", "--unix-socket-dir", str(tmp_path / "sock"))
    try:
        assert all(target.startswith("unix:") for target in egbe.targets.values())
        for target in egbe.targets.values():
            async with grpc.aio.insecure_channel(target) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        assert stop_embedded(egbe) == 0
