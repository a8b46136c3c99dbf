"""What the chassis observes of every call, over a real socket: the server span (the child of the
caller's `traceparent`), the log context a handler's lines carry, and the RPC counts by code."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from assembly.settings import load_settings
from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import Role, TokenStore, bearer_metadata
from services.errors import InvalidArgument
from services.logging import bind_context, get_logger
from services.server import ServiceBundle, start_service
from services.settings import Endpoint
from tests.prometheus_samples import exposed_samples

TOKENS = {role: f"{role.value}-token-for-observed-test" for role in Role}
SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
METHOD = f"/{SERVICE}/EvaluateBudget"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class _Budget(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Any
    ) -> gateway_pb2.EvaluateBudgetResponse:
        bind_context(world="hamlet-7")
        get_logger(__name__).info("budget evaluated")
        if request.world_cap_tokens == 13:
            raise InvalidArgument.field("world_cap_tokens", "is unlucky")
        return gateway_pb2.EvaluateBudgetResponse(world_cap_tokens=request.world_cap_tokens)


async def test_a_call_is_traced_logged_with_its_context_and_counted(
    spans: InMemorySpanExporter, tmp_path: Path, json_log: io.StringIO
) -> None:
    registry = CollectorRegistry()
    bundle = ServiceBundle(
        "gateway",
        [(gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server, _Budget())],
        {SERVICE: {"EvaluateBudget": frozenset({Role.SERVICE})}},
        metrics=registry,
    )
    settings = load_settings(data_dir=tmp_path)
    tokens = TokenStore({role: [token] for role, token in TOKENS.items()})
    running = await start_service(bundle, Endpoint(port=0, metrics_port=0), tokens, settings)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
            traced = (*bearer_metadata(TOKENS[Role.SERVICE]), ("traceparent", TRACEPARENT))
            await stub.EvaluateBudget(gateway_pb2.EvaluateBudgetRequest(world_cap_tokens=7), metadata=traced)
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.EvaluateBudget(
                    gateway_pb2.EvaluateBudgetRequest(world_cap_tokens=13), metadata=traced
                )
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.EvaluateBudget(gateway_pb2.EvaluateBudgetRequest(), metadata=())
    finally:
        await running.stop()
    samples = exposed_samples(generate_latest(registry))

    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == [METHOD] * 3
    # The two calls that sent a traceparent continue the caller's trace; the third starts its own.
    continued = [s for s in finished if format(s.context.trace_id, "032x") == TRACE_ID]
    assert len(continued) == 2
    assert {format(s.parent.span_id, "016x") for s in continued if s.parent} == {"00f067aa0ba902b7"}
    lines = [json.loads(line) for line in json_log.getvalue().splitlines() if '"budget evaluated"' in line]
    assert [(line["service"], line["world"], line["trace_id"]) for line in lines] == [
        ("gateway", "hamlet-7", TRACE_ID)
    ] * 2
    labels = (("method", METHOD), ("service", "gateway"))
    assert {
        code: samples[("egbe_rpc_handled_total", (("code", code), *labels))]
        for code in ("OK", "INVALID_ARGUMENT", "UNAUTHENTICATED")
    } == {"OK": 1, "INVALID_ARGUMENT": 1, "UNAUTHENTICATED": 1}
    assert samples[("egbe_rpc_duration_seconds_count", labels)] == 3
