"""One cognition call is one trace across every service: a player's line to an Ori, through the
embedded services over real sockets, with spans exported to memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assembly.embedded import DemoTarget, services_for_run
from assembly.settings import load_settings
from egbe.v1 import action_pb2, kernel_pb2, kernel_pb2_grpc, perception_pb2
from services import tracing
from services.auth import Role, bearer_metadata
from services.settings import SERVICE_NAMES, Endpoint
from tests.kernel_service.frames import WORLD, frame, registrations, rows

pytestmark = pytest.mark.slow


def _said(result: action_pb2.TickResult) -> bool:
    return any(i.kind == action_pb2.ACTION_KIND_SAY and "speech" in i.payload for i in result.actions.intents)


async def _speak_to_ori(tmp_path: Path) -> None:
    """Register three Ori, say a line to the first, tick until its reply is said."""
    settings = load_settings(
        data_dir=tmp_path / "data",
        endpoints={name: Endpoint(port=0) for name in SERVICE_NAMES},
        log_level="warning",
    )
    async with services_for_run(settings, tmp_path / "run", 600, DemoTarget.EMBEDDED) as services:
        world = bearer_metadata(services.tokens.token_for(Role.WORLD))
        async with grpc.aio.insecure_channel(services.targets["kernel"]) as channel:
            kernel = kernel_pb2_grpc.KernelServiceStub(channel)
            await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(3)), metadata=world
            )
            for tick in range(1, 400):
                batch = rows(tick, [frame(slot) for slot in range(3)])
                if tick == 2:
                    line = perception_pb2.SpokenLine(
                        speaker_id="player-1", speaker_name="the traveller", text="Is the forge hot today?"
                    )
                    batch.situations.add(slot=0, player_line=line)
                reply = await kernel.Tick(kernel_pb2.TickRequest(batch=batch), metadata=world)
                if _said(reply.result):
                    return
                await asyncio.sleep(0.01)
    raise AssertionError("the Ori's reply never came back")


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_a_dialogue_call_is_one_trace_through_every_service(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    await _speak_to_ori(tmp_path)
    tracing.flush()
    finished = spans.get_finished_spans()
    [root] = [
        s
        for s in finished
        if s.name == "kernel.dispatch"
        and s.attributes
        and s.attributes["egbe.cause"] == action_pb2.COGNITION_CAUSE_DIALOGUE
    ]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["egbe.ori_id"] == "ori-0"
    trace = [s for s in finished if s.context.trace_id == root.context.trace_id]
    assert {s.resource.attributes["service.name"] for s in trace} == {
        "egbe-kernel",
        "egbe-gateway",
        "egbe-cognition",
        "egbe-policy",
        "egbe-biography",
    }
    by_id = {s.context.span_id: s for s in trace}
    # Every span of the trace hangs from the kernel's dispatch.
    assert all(_ancestors(s, by_id)[-1:] == ["kernel.dispatch"] for s in trace if s is not root)

    def one(name: str) -> ReadableSpan:
        [found] = [s for s in trace if s.name == name]
        return found

    submit = "/egbe.v1.CognitionGatewayService/Submit"
    think = "/egbe.v1.CognitionService/Think"
    generate = "/egbe.v1.CognitionGatewayService/Generate"
    assert _ancestors(one(submit), by_id) == ["kernel.dispatch"]
    assert _ancestors(one("gateway.admission"), by_id) == [submit, "kernel.dispatch"]
    assert _ancestors(one("gateway.settlement"), by_id) == [submit, "kernel.dispatch"]
    assert _ancestors(one(think), by_id) == [submit, "kernel.dispatch"]
    for stage in ("assemble", "ground", "dispatch", "gate", "commit"):
        assert all(_ancestors(s, by_id)[0] == think for s in trace if s.name == f"cognition.{stage}"), stage
        assert any(s.name == f"cognition.{stage}" for s in trace), stage
    assert _ancestors(one(generate), by_id) == [think, submit, "kernel.dispatch"]
    for peer in (
        "/egbe.v1.PolicyService/Gate",
        "/egbe.v1.BiographyService/Append",
        "/egbe.v1.BiographyService/Rehydrate",
    ):
        assert _ancestors(one(peer), by_id)[0] == think, peer
    [model] = [s for s in trace if s.name.startswith("chat ")]
    assert _ancestors(model, by_id)[0] == generate
    assert model.attributes is not None
    assert (model.attributes["gen_ai.operation.name"], model.attributes["gen_ai.system"]) == (
        "chat",
        "offline",
    )
    assert model.attributes["gen_ai.request.model"] == "deterministic-v1"
    assert int(model.attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert int(model.attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert model.attributes["egbe.offline"] is True
