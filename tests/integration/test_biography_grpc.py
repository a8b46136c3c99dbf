"""BiographyService over real gRPC on loopback, on both backends: the wire contract and bad input."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status

from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.integration.conftest import SERVICE_TOKEN, WORLD_TOKEN

AUTH = bearer_metadata(SERVICE_TOKEN)
Kind = biography_pb2.ExpectedVersion


def new_memory(text: str, salience_bp: int = 5000, event_id: str | None = None) -> biography_pb2.NewOriEvent:
    message = biography_pb2.NewOriEvent(
        event_id=event_id or str(uuid.uuid4()),
        kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
        world_tick=7,
    )
    message.payload.update({"text": text, "salience_bp": salience_bp})
    return message


def append(
    ori_id: str, *events: biography_pb2.NewOriEvent, kind: Any = Kind.KIND_ANY, version: int = 0
) -> Any:
    return biography_pb2.AppendRequest(
        ori_id=ori_id, expected_version=Kind(kind=kind, version=version), events=list(events)
    )


async def test_append_read_and_verify_over_grpc(stub: biography_pb2_grpc.BiographyServiceStub) -> None:
    batch = [new_memory(f"m{i}") for i in range(3)]
    answer = await stub.Append(append("ori-1", *batch, kind=Kind.KIND_NO_STREAM), metadata=AUTH)
    assert (answer.next_expected_version, answer.first_global_position, answer.last_global_position) == (
        2,
        1,
        3,
    )
    repeat = await stub.Append(append("ori-1", *batch, kind=Kind.KIND_NO_STREAM), metadata=AUTH)
    assert repeat.already_recorded
    first = await stub.Read(biography_pb2.ReadRequest(ori_id="ori-1", page_size=2), metadata=AUTH)
    assert [e.stream_version for e in first.events] == [0, 1]
    assert first.events[0].payload["text"] == "m0"
    assert first.events[0].kind == biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED
    assert first.events[1].previous_hash == first.events[0].hash
    rest = await stub.Read(
        biography_pb2.ReadRequest(ori_id="ori-1", page_size=2, page_token=first.next_page_token),
        metadata=AUTH,
    )
    assert [e.stream_version for e in rest.events] == [2]
    assert rest.next_page_token == ""
    everything = await stub.Read(biography_pb2.ReadRequest(ori_id="$all"), metadata=AUTH)
    assert [e.global_position for e in everything.events] == [1, 2, 3]
    report = await stub.VerifyChain(biography_pb2.VerifyChainRequest(ori_id="ori-1"), metadata=AUTH)
    assert report.intact
    assert report.events_checked == 3


async def test_a_version_conflict_is_aborted_with_the_actual_version(
    stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    await stub.Append(append("ori-1", new_memory("a"), new_memory("b")), metadata=AUTH)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(append("ori-1", new_memory("c"), kind=Kind.KIND_EXACT, version=0), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.ABORTED
    assert "actual version is 1" in (caught.value.details() or "")
    status = rpc_status.from_call(caught.value)
    assert status is not None
    infos = [d for d in status.details if d.type_url.endswith("google.rpc.ErrorInfo")]
    assert infos, "ABORTED carries an ErrorInfo with the actual version"


async def test_same_event_id_with_other_content_is_already_exists(
    stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    event_id = str(uuid.uuid4())
    await stub.Append(append("ori-1", new_memory("original", event_id=event_id)), metadata=AUTH)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(append("ori-1", new_memory("forged", event_id=event_id)), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS


def _unknown_kind() -> biography_pb2.AppendRequest:
    request = append("ori-1", new_memory("ok"))
    request.events[0].kind = 42  # type: ignore[assignment]
    return request


def _unspecified_kind() -> biography_pb2.AppendRequest:
    request = append("ori-1", new_memory("ok"))
    request.events[0].kind = biography_pb2.ORI_EVENT_KIND_UNSPECIFIED
    return request


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (_unknown_kind, "events[0].kind"),
        (_unspecified_kind, "events[0].kind"),
        (lambda: append("", new_memory("ok")), "ori_id"),
        (lambda: append("ori-1", new_memory("x" * 300)), "events[0].payload"),
        (
            lambda: append("ori-1", new_memory("ok"), kind=Kind.KIND_EXACT, version=2**63),
            "expected_version.version",
        ),
        (lambda: append("ori-1", *[new_memory(str(i)) for i in range(6)]), "events"),
        (lambda: append("ori-1"), "events"),
        (lambda: append("ori-1", new_memory("ok", event_id="not-a-uuid")), "events[0].event_id"),
        (lambda: append("ori-1", new_memory("ok", salience_bp=20_000)), "events[0].payload.salience_bp"),
    ],
)
async def test_bad_appends_are_invalid_argument_naming_the_field_and_write_nothing(
    sqlite_stub: biography_pb2_grpc.BiographyServiceStub, build: Any, field: str
) -> None:
    stub = sqlite_stub
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(build(), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert field in [v.field for v in field_violations(status)]
    everything = await stub.Read(biography_pb2.ReadRequest(ori_id="$all"), metadata=AUTH)
    assert list(everything.events) == []


async def test_a_bad_page_token_and_a_world_caller_are_refused(
    sqlite_stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    stub = sqlite_stub
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Read(biography_pb2.ReadRequest(ori_id="ori-1", page_token="garbage"), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await stub.Append(append("ori-1", new_memory("a")), metadata=bearer_metadata(WORLD_TOKEN))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_rehydrate_and_consolidate_over_grpc(stub: biography_pb2_grpc.BiographyServiceStub) -> None:
    fragments = []
    for i, (kind, payload) in enumerate(
        [
            (biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, {"text": "saw the storm", "salience_bp": 9000}),
            (biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED, {"other_ori_id": "ori-2", "bond": 30}),
            (biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, {"text": "fixed the fence"}),
            (biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED, {"arc_ref": "arc:storm"}),
        ]
    ):
        fragment = biography_pb2.ConsolidationFragment(fragment_id=f"frag-{i}", kind=kind, world_tick=i)
        fragment.payload.update(payload)
        fragments.append(fragment)
    request = biography_pb2.ConsolidateRequest(ori_id="ori-1", fragments=fragments, request_id="day-1")
    done = await stub.Consolidate(request, metadata=AUTH)
    assert done.no_state_loss
    assert list(done.missing_fragment_ids) == []
    assert {e.payload["fragment_kind"] for e in done.events} == {
        "MemoryFormed",
        "RelationshipChanged",
        "ArcAdvanced",
    }
    again = await stub.Consolidate(request, metadata=AUTH)
    assert [e.global_position for e in again.events] == [e.global_position for e in done.events]
    context = await stub.Rehydrate(biography_pb2.RehydrateRequest(ori_id="ori-1"), metadata=AUTH)
    assert [m.event_id for m in context.memories] == ["frag-0", "frag-2"]
    assert [(r.other_ori_id, r.bond) for r in context.relationships] == [("ori-2", 30)]
    assert list(context.arc_refs) == ["arc:storm"]
    tight = await stub.Rehydrate(biography_pb2.RehydrateRequest(ori_id="ori-1", max_events=2), metadata=AUTH)
    assert dict(tight.omitted) == {"memories": 2}
    bad = biography_pb2.ConsolidateRequest(ori_id="ori-1", fragments=[fragments[0], fragments[0]])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Consolidate(bad, metadata=AUTH)
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert "fragments[1].fragment_id" in [v.field for v in field_violations(status)]


async def test_subscribe_catches_up_then_goes_live_over_grpc(
    stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    await stub.Append(append("ori-1", new_memory("before-1"), new_memory("before-2")), metadata=AUTH)
    await stub.Append(append("ori-2", new_memory("other stream")), metadata=AUTH)
    call = stub.Subscribe(biography_pb2.SubscribeRequest(from_position=1, ori_ids=["ori-1"]), metadata=AUTH)
    received: list[biography_pb2.SubscribeResponse] = []

    async def take(count: int) -> None:
        async for item in call:
            received.append(item)
            if len(received) == count:
                return

    await asyncio.wait_for(take(2), timeout=10)
    await stub.Append(append("ori-1", new_memory("after")), metadata=AUTH)
    await asyncio.wait_for(take(3), timeout=10)
    call.cancel()
    assert [r.event.payload["text"] for r in received] == ["before-1", "before-2", "after"]
    assert [r.live for r in received] == [False, False, True]
