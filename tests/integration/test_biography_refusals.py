"""Append and Read at their limits over real gRPC, on both backends: every refusal names its field and
leaves the log as it was (read back before and after), and no default page outgrows a default client."""

from __future__ import annotations

import math
import uuid
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from biography_service.config import BiographyConfig
from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.integration.conftest import SERVICE_TOKEN
from tests.integration.test_biography_grpc import append, new_memory

AUTH = bearer_metadata(SERVICE_TOKEN)
Kind = biography_pb2.ExpectedVersion
Stub = biography_pb2_grpc.BiographyServiceStub
# What identifies a log's state: each event's place and its chained hash, per stream and overall.
State = tuple[list[tuple[str, int, int, str]], list[tuple[str, int, int, str]]]


async def _events(stub: Stub, ori_id: str) -> list[biography_pb2.OriEvent]:
    events: list[biography_pb2.OriEvent] = []
    token = ""
    while True:
        page = await stub.Read(biography_pb2.ReadRequest(ori_id=ori_id, page_token=token), metadata=AUTH)
        events += page.events
        token = page.next_page_token
        if not token:
            return events


async def _state(stub: Stub, ori_id: str) -> State:
    def rows(events: list[biography_pb2.OriEvent]) -> list[tuple[str, int, int, str]]:
        return [(e.event_id, e.stream_version, e.global_position, e.hash) for e in events]

    return rows(await _events(stub, ori_id)), rows(await _events(stub, "$all"))


async def _refused(stub: Stub, request: biography_pb2.AppendRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(request, metadata=AUTH)
    return caught.value


def _violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    status = rpc_status.from_call(error)
    assert status is not None
    return [(v.field, v.description) for v in field_violations(status)]


async def _seeded(stub: Stub) -> State:
    """ori-1 with two events (versions 0 and 1), so a refused append has something to leave alone."""
    await stub.Append(
        append("ori-1", new_memory("a"), new_memory("b"), kind=Kind.KIND_NO_STREAM), metadata=AUTH
    )
    state = await _state(stub, "ori-1")
    assert [row[1] for row in state[0]] == [0, 1]
    return state


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["top", "nested"])
async def test_a_non_finite_payload_number_is_refused_naming_the_payload(
    stub: Stub, bad: float, where: str
) -> None:
    before = await _seeded(stub)
    broken = biography_pb2.NewOriEvent(
        event_id=str(uuid.uuid4()), kind=biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED, world_tick=3
    )
    broken.payload.update({"why": bad} if where == "top" else {"why": {"scores": [1, bad]}})
    error = await _refused(stub, append("ori-1", new_memory("c"), broken, kind=Kind.KIND_EXACT, version=1))
    assert _violations(error) == [("events[1].payload", "must not contain NaN or infinite numbers")]
    assert await _state(stub, "ori-1") == before


@pytest.mark.parametrize(
    "payload", [{"text": "a\x00b"}, {"text": "a", "note\x00": 1}, {"text": "a", "l": ["\x00"]}]
)
async def test_a_nul_in_a_payload_string_is_refused_on_every_backend(
    stub: Stub, payload: dict[str, Any]
) -> None:
    before = await _seeded(stub)
    event = new_memory("c")
    event.payload.Clear()
    event.payload.update(payload)
    error = await _refused(stub, append("ori-1", event))
    assert _violations(error) == [("events[0].payload", "must not contain NUL characters")]
    assert await _state(stub, "ori-1") == before
    # What only looks like one in the encoding (a backslash, then "u0000") is ordinary text.
    lookalike = new_memory("\\u0000 is how JSON writes a NUL")
    await stub.Append(append("ori-1", lookalike), metadata=AUTH)
    assert (await _events(stub, "ori-1"))[-1].payload["text"] == "\\u0000 is how JSON writes a NUL"


async def test_an_ori_id_with_a_control_character_is_refused(stub: Stub) -> None:
    error = await _refused(stub, append("ori\x00-1", new_memory("a")))
    assert _violations(error) == [("ori_id", "must not contain control characters")]
    assert await _events(stub, "$all") == []


@pytest.mark.parametrize("kind", [5, 99, -1])
async def test_an_unknown_expected_version_kind_is_refused_not_read_as_any(stub: Stub, kind: int) -> None:
    before = await _seeded(stub)
    # Version 0 is stale (the stream is at 1): read as ANY, this append would have gone through.
    request = append("ori-1", new_memory("c"), kind=kind)
    error = await _refused(stub, request)
    assert _violations(error) == [("expected_version.kind", f"unknown expected-version kind {kind}")]
    assert await _state(stub, "ori-1") == before


async def test_unspecified_and_any_expected_versions_are_both_any(stub: Stub) -> None:
    await _seeded(stub)
    for kind in (Kind.KIND_UNSPECIFIED, Kind.KIND_ANY):
        answer = await stub.Append(append("ori-1", new_memory("c"), kind=kind), metadata=AUTH)
        assert not answer.already_recorded
    assert [row[1] for row in (await _state(stub, "ori-1"))[0]] == [0, 1, 2, 3]


def _with_provenance(provenance_ref: str) -> biography_pb2.NewOriEvent:
    event = new_memory("c")
    event.provenance_ref = provenance_ref
    return event


async def test_a_provenance_ref_is_bounded_and_free_of_nul(stub: Stub) -> None:
    limit = BiographyConfig().max_provenance_ref_chars
    before = await _seeded(stub)
    error = await _refused(stub, append("ori-1", new_memory("c"), _with_provenance("é" * (limit + 1))))
    assert _violations(error) == [
        ("events[1].provenance_ref", f"is {limit + 1} characters; the limit is {limit}")
    ]
    error = await _refused(stub, append("ori-1", _with_provenance("run:\x00")))
    assert _violations(error) == [("events[0].provenance_ref", "must not contain NUL characters")]
    assert await _state(stub, "ori-1") == before
    longest = "é" * limit
    await stub.Append(
        append("ori-1", _with_provenance(longest), kind=Kind.KIND_EXACT, version=1), metadata=AUTH
    )
    events = await _events(stub, "ori-1")
    assert [e.provenance_ref for e in events] == ["", "", longest]
    report = await stub.VerifyChain(biography_pb2.VerifyChainRequest(ori_id="ori-1"), metadata=AUTH)
    assert (report.intact, report.events_checked) == (True, 3)


async def test_a_repeat_under_exact_zero_of_the_first_event_already_exists(stub: Stub) -> None:
    first = new_memory("first")
    opened = await stub.Append(append("ori-1", first, kind=Kind.KIND_NO_STREAM), metadata=AUTH)
    before = await _state(stub, "ori-1")
    # The stream does end at version 0, but with this very event: a retry under the "actual version"
    # could never succeed, so the answer is ALREADY_EXISTS, not ABORTED.
    error = await _refused(stub, append("ori-1", first, kind=Kind.KIND_EXACT, version=0))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert error.details() == (
        f"event {first.event_id}: already recorded at version 0, where expected version 0 does not place it"
    )
    status = rpc_status.from_call(error)
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert [d.Unpack(info) for d in status.details if d.Is(info.DESCRIPTOR)] == [True]
    assert dict(info.metadata) == {"event_id": first.event_id}
    assert await _state(stub, "ori-1") == before
    # Where the expectation does place it (the repeat of the original call), it is the first result.
    repeat = await stub.Append(append("ori-1", first, kind=Kind.KIND_NO_STREAM), metadata=AUTH)
    assert repeat == biography_pb2.AppendResponse(
        next_expected_version=opened.next_expected_version,
        first_global_position=opened.first_global_position,
        last_global_position=opened.last_global_position,
        already_recorded=True,
    )


def _large(index: int, payload_bytes: int, provenance_chars: int) -> biography_pb2.NewOriEvent:
    event = biography_pb2.NewOriEvent(
        event_id=str(uuid.uuid4()),
        kind=biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED,
        world_tick=index,
        provenance_ref="p" * provenance_chars,
    )
    event.payload.update({"n": index, "note": "x" * (payload_bytes - 40)})
    return event


async def test_a_default_page_of_the_largest_events_fits_a_default_client(default_limits_stub: Stub) -> None:
    """80 events of the largest payload and provenance (over 5 MB in all) read through a channel with
    gRPC's default 4 MiB receive limit: each default page stays within max_page_bytes, and following
    the tokens gives every event once, in order, forward, backward and over "$all"."""
    stub = default_limits_stub
    defaults = BiographyConfig()
    count = 80
    for start in range(0, count, 10):
        batch = [
            _large(i, defaults.max_payload_bytes, defaults.max_provenance_ref_chars)
            for i in range(start, start + 10)
        ]
        await stub.Append(append("ori-big", *batch), metadata=AUTH)
    await stub.Append(append("ori-small", new_memory("after")), metadata=AUTH)

    async def pages(request: biography_pb2.ReadRequest) -> list[list[Any]]:
        found = []
        while True:
            page = await stub.Read(request, metadata=AUTH)
            assert page.ByteSize() <= defaults.max_page_bytes + 1024
            found.append(list(page.events))
            if not page.next_page_token:
                return found
            request = biography_pb2.ReadRequest(
                ori_id=request.ori_id, direction=request.direction, page_token=page.next_page_token
            )

    forward = await pages(biography_pb2.ReadRequest(ori_id="ori-big"))
    assert len(forward) > 1
    assert 1 < len(forward[0]) < defaults.default_page_size
    assert [e.world_tick for page in forward for e in page] == list(range(count))
    backward = await pages(
        biography_pb2.ReadRequest(ori_id="ori-big", direction=biography_pb2.READ_DIRECTION_BACKWARD)
    )
    assert [e.stream_version for page in backward for e in page] == list(reversed(range(count)))
    everything = await pages(biography_pb2.ReadRequest(ori_id="$all"))
    assert [e.global_position for page in everything for e in page] == list(range(1, count + 2))
