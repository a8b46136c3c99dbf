"""The chassis's bounds over real gRPC: message sizes, calls in progress, silent connections,
unexpected exceptions, refusal logging and reflection."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from assembly.settings import EgbeSettings, load_settings
from egbe.v1 import gateway_pb2, gateway_pb2_grpc, kernel_pb2, perception_pb2
from services.auth import Role, TokenStore, bearer_metadata
from services.errors import retry_delay_seconds
from services.limits import RateLimitedLog, server_options
from services.server import RunningService, ServiceBundle, start_service
from services.settings import Endpoint, Mode

SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
METHOD = f"/{SERVICE}/EvaluateBudget"
TOKENS = {role: f"{role.value}-token-for-limits-test" for role in Role}
BLOCK = 1  # world_cap_tokens asking the servicer to wait for `release`
EXPLODE = 2  # world_cap_tokens asking the servicer to fail unexpectedly
SECRET = "db password hunter2 in a Python message"


class _Servicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    def __init__(self) -> None:
        self.entered = 0
        self.both_entered = asyncio.Event()
        self.release = asyncio.Event()

    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Any
    ) -> gateway_pb2.EvaluateBudgetResponse:
        if request.world_cap_tokens == EXPLODE:
            raise RuntimeError(SECRET)
        if request.world_cap_tokens == BLOCK:
            self.entered += 1
            if self.entered == 2:
                self.both_entered.set()
            await self.release.wait()
        return gateway_pb2.EvaluateBudgetResponse(world_cap_tokens=request.world_cap_tokens)


@asynccontextmanager
async def _served(settings: EgbeSettings) -> AsyncIterator[tuple[RunningService, _Servicer]]:
    servicer = _Servicer()
    bundle = ServiceBundle(
        name="gateway",
        servicers=[(gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server, servicer)],
        method_roles={SERVICE: {"EvaluateBudget": frozenset({Role.SERVICE})}},
    )
    tokens = TokenStore({role: [token] for role, token in TOKENS.items()})
    running = await start_service(bundle, Endpoint(port=0), tokens, settings)
    try:
        yield running, servicer
    finally:
        servicer.release.set()
        await running.stop()


async def _evaluate(
    channel: grpc.aio.Channel, cap: int, *, role: Role | None = Role.SERVICE, padding: int = 0
) -> Any:
    request = gateway_pb2.EvaluateBudgetRequest(world_cap_tokens=cap)
    if padding:
        request.requests.add(ori_id="x" * padding)
    metadata = bearer_metadata(TOKENS[role]) if role else ()
    stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
    try:
        return await stub.EvaluateBudget(request, metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as error:
        return error


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_perception_batch_of_a_million_agents_fits_the_kernel_and_nothing_else_takes_64_mib() -> None:
    agents = 10**6
    widths = {
        "slots": "<u4",
        "signal_flags": "<u2",
        "visual_lod": "u1",
        "player_proximity_mm": "<i4",
        "addressed_by_player_id": "<u4",
        "goal_ref": "<u4",
        "goal_progress_signature": "<u8",
        "need_safety_bp": "<u2",
        "need_sustaining_bp": "<u2",
        "need_social_bp": "<u2",
        "need_purpose_bp": "<u2",
        "fatigue_bp": "<u2",
    }
    columns = perception_pb2.PerceptionColumns(
        layout_version=1,
        count=agents,
        **{name: np.zeros(agents, dtype=dtype).tobytes() for name, dtype in widths.items()},
    )
    batch = perception_pb2.PerceptionBatch(world_id="w" * 64, tick=2**63, columns=columns)
    request = kernel_pb2.StreamTicksRequest(batch=batch)
    assert request.ByteSize() == 37_000_146
    limits = load_settings().server_limits
    assert request.ByteSize() < limits["kernel"].max_message_bytes == 48 * 1024 * 1024
    assert {name: limit.max_message_bytes // (1024 * 1024) for name, limit in limits.items()} == {
        "kernel": 48,
        "gateway": 16,
        "cognition": 4,
        "policy": 4,
        "biography": 16,
    }


def test_server_options_bound_streams_connection_age_idleness_and_the_preface() -> None:
    settings = load_settings(max_connection_age_grace_seconds=30)
    assert dict(server_options(settings, settings.server_limits["policy"])) == {
        "grpc.max_receive_message_length": 4 * 1024 * 1024,
        "grpc.max_send_message_length": 4 * 1024 * 1024,
        "grpc.max_concurrent_streams": 1024,
        "grpc.max_connection_age_ms": 1_800_000,
        "grpc.max_connection_age_grace_ms": 30_000,
        "grpc.max_connection_idle_ms": 600_000,
        "grpc.server_handshake_timeout_ms": 10_000,
    }


async def test_an_oversized_message_is_refused_and_the_service_keeps_serving(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, server_limits={"gateway": {"max_message_bytes": 4096}})
    async with _served(settings) as (running, _), grpc.aio.insecure_channel(running.target) as channel:
        refused = await _evaluate(channel, 7, padding=8192)
        assert isinstance(refused, grpc.aio.AioRpcError)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await _evaluate(channel, 7, padding=1024)).world_cap_tokens == 7


async def test_calls_past_the_limit_are_shed_with_retry_info_not_queued(tmp_path: Path) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        server_limits={"gateway": {"max_concurrent_calls": 2}},
        shed_retry_after_seconds=0.75,
    )
    async with _served(settings) as (running, servicer), grpc.aio.insecure_channel(running.target) as channel:
        held = [asyncio.create_task(_evaluate(channel, BLOCK)) for _ in range(2)]
        await asyncio.wait_for(servicer.both_entered.wait(), 10)
        started = time.monotonic()
        shed = await _evaluate(channel, 7)
        assert time.monotonic() - started < 2  # answered at once, not after the held calls
        assert isinstance(shed, grpc.aio.AioRpcError)
        assert shed.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert shed.details() == "gateway has 2 calls in progress, its limit; retry after 0.75 s"
        status = rpc_status.from_call(shed)
        assert status is not None
        assert retry_delay_seconds(status) == 0.75
        # A refused caller takes no slot: it is told who it is not, not that the service is busy.
        unauthenticated = await _evaluate(channel, 7, role=None)
        assert unauthenticated.code() == grpc.StatusCode.UNAUTHENTICATED
        servicer.release.set()
        assert [reply.world_cap_tokens for reply in await asyncio.gather(*held)] == [BLOCK, BLOCK]
        assert (await _evaluate(channel, 7)).world_cap_tokens == 7


async def test_an_unexpected_exception_tells_the_client_only_an_id_the_log_explains(
    tmp_path: Path, json_log: io.StringIO
) -> None:
    async with (
        _served(load_settings(data_dir=tmp_path)) as (running, _),
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        failed = await _evaluate(channel, EXPLODE)
        assert (await _evaluate(channel, 7)).world_cap_tokens == 7
    assert failed.code() == grpc.StatusCode.INTERNAL
    prefix = "internal error; correlation id "
    assert failed.details().startswith(prefix)
    correlation_id = failed.details().removeprefix(prefix)
    assert len(correlation_id) == 16
    assert int(correlation_id, 16) >= 0
    status = rpc_status.from_call(failed)
    assert status is not None
    assert SECRET not in str(status)
    [entry] = [line for line in _lines(json_log) if line["event"] == "unexpected exception"]
    assert entry["level"] == "error"
    assert entry["correlation_id"] == correlation_id
    assert entry["rpc"] == METHOD
    assert entry["service"] == "gateway"
    assert "Traceback (most recent call last)" in entry["exception"]
    assert f"RuntimeError: {SECRET}" in entry["exception"]


async def test_refused_calls_are_logged_with_peer_and_method_at_a_bounded_rate(
    tmp_path: Path, json_log: io.StringIO
) -> None:
    settings = load_settings(data_dir=tmp_path, refusal_log_lines_per_minute=3)
    async with _served(settings) as (running, _), grpc.aio.insecure_channel(running.target) as channel:
        outcomes = [(await _evaluate(channel, 7, role=None)).code() for _ in range(40)]
        outcomes.append((await _evaluate(channel, 7, role=Role.WORLD)).code())
    assert outcomes == [grpc.StatusCode.UNAUTHENTICATED] * 40 + [grpc.StatusCode.PERMISSION_DENIED]
    refused = [line for line in _lines(json_log) if line["event"] == "call refused"]
    assert [(line["rpc"], line["code"], line["caller"]) for line in refused] == [
        (METHOD, "UNAUTHENTICATED", None)
    ] * 3
    assert all(line["peer"].startswith("ipv4:127.0.0.1:") for line in refused)
    assert all(line["level"] == "warning" and line["suppressed"] == 0 for line in refused)


def test_the_refusal_log_reports_what_it_held_back_once_a_minute_has_passed(json_log: io.StringIO) -> None:
    now = [0.0]
    refusals = RateLimitedLog(2, clock=lambda: now[0])
    for _ in range(10):
        refusals.warning("call refused", rpc=METHOD)
    now[0] = 60.0
    refusals.warning("call refused", rpc=METHOD)
    assert [line["suppressed"] for line in _lines(json_log)] == [0, 0, 8]


async def test_a_connection_that_never_sends_its_preface_is_closed(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, handshake_timeout_seconds=0.5)
    async with _served(settings) as (running, _):
        host, _, port = running.target.rpartition(":")

        def silent_connection_lifetime() -> float:
            with socket.create_connection((host, int(port)), timeout=10) as silent:
                started = time.monotonic()
                while silent.recv(4096):
                    pass
                return time.monotonic() - started

        assert 0.4 < await asyncio.to_thread(silent_connection_lifetime) < 5


@pytest.mark.parametrize(("mode", "listed"), [(Mode.EMBEDDED, True), (Mode.PRODUCTION, False)])
async def test_reflection_is_served_in_embedded_mode_and_off_in_production(
    tmp_path: Path, mode: Mode, listed: bool
) -> None:
    settings = load_settings(data_dir=tmp_path, mode=mode)
    async with _served(settings) as (running, _), grpc.aio.insecure_channel(running.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        call = stub.ServerReflectionInfo(iter([request]), timeout=10)
        if not listed:
            assert await call.code() == grpc.StatusCode.UNIMPLEMENTED
            return
        reply = await call.read()
    assert SERVICE in {service.name for service in reply.list_services_response.service}
