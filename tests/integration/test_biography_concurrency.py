"""10 writers x 100 appends to overlapping streams, 2 live subscribers, over real gRPC on both backends."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import grpc

from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import bearer_metadata
from tests.integration.conftest import SERVICE_TOKEN

WRITERS = 10
APPENDS_PER_WRITER = 100
STREAMS = 4
AUTH = bearer_metadata(SERVICE_TOKEN)
Kind = biography_pb2.ExpectedVersion


@dataclass
class WriterLog:
    """What one writer was told: acknowledged event ids with their positions, and its conflicts."""

    acknowledged: list[tuple[str, list[str], int, int]] = field(default_factory=list)
    conflicts: int = 0
    unexpected: list[str] = field(default_factory=list)


def _event(writer: int, n: int, k: int) -> biography_pb2.NewOriEvent:
    message = biography_pb2.NewOriEvent(
        event_id=str(uuid.uuid4()), kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, world_tick=n
    )
    message.payload.update({"text": f"w{writer} n{n} k{k}"})
    return message


async def _writer(stub: biography_pb2_grpc.BiographyServiceStub, writer: int, log: WriterLog) -> None:
    believed: dict[str, int | None] = {}
    for n in range(APPENDS_PER_WRITER):
        ori_id = f"ori-{(writer + n) % STREAMS}"
        events = [_event(writer, n, k) for k in range(1 + n % 3)]
        # Even writers race with optimistic EXACT versions they may hold stale; odd writers append ANY.
        if writer % 2 == 0 and believed.get(ori_id) is not None:
            expected = Kind(kind=Kind.KIND_EXACT, version=believed[ori_id] or 0)
        elif writer % 2 == 0:
            expected = Kind(kind=Kind.KIND_NO_STREAM)
        else:
            expected = Kind(kind=Kind.KIND_ANY)
        request = biography_pb2.AppendRequest(ori_id=ori_id, expected_version=expected, events=events)
        try:
            answer = await stub.Append(request, metadata=AUTH)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.ABORTED:
                log.unexpected.append(f"{error.code()}: {error.details()}")
                continue
            log.conflicts += 1
            head = await stub.Read(
                biography_pb2.ReadRequest(
                    ori_id=ori_id, direction=biography_pb2.READ_DIRECTION_BACKWARD, page_size=1
                ),
                metadata=AUTH,
            )
            believed[ori_id] = head.events[0].stream_version if head.events else None
            continue
        believed[ori_id] = answer.next_expected_version
        ids = [e.event_id for e in events]
        log.acknowledged.append((ori_id, ids, answer.first_global_position, answer.last_global_position))


async def _subscriber(
    stub: biography_pb2_grpc.BiographyServiceStub,
    seen: list[biography_pb2.OriEvent],
    delivered: asyncio.Condition,
) -> None:
    async for item in stub.Subscribe(biography_pb2.SubscribeRequest(from_position=1), metadata=AUTH):
        seen.append(item.event)
        async with delivered:
            delivered.notify_all()


async def test_ten_writers_and_two_subscribers_lose_duplicate_and_reorder_nothing(
    stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    logs = [WriterLog() for _ in range(WRITERS)]
    seen: list[list[biography_pb2.OriEvent]] = [[], []]
    delivered = asyncio.Condition()
    subscribers = [asyncio.create_task(_subscriber(stub, s, delivered)) for s in seen]
    await asyncio.gather(*(_writer(stub, w, log) for w, log in enumerate(logs)))
    everything: list[biography_pb2.OriEvent] = []
    token = ""
    while True:
        page = await stub.Read(
            biography_pb2.ReadRequest(ori_id="$all", page_size=1000, page_token=token), metadata=AUTH
        )
        everything += page.events
        token = page.next_page_token
        if not token:
            break
    async with delivered:
        caught_up = delivered.wait_for(lambda: min(len(s) for s in seen) >= len(everything))
        await asyncio.wait_for(caught_up, timeout=60)
    await asyncio.sleep(0.2)  # room for a duplicate to show up, if there were one
    for task in subscribers:
        task.cancel()

    assert [log.unexpected for log in logs] == [[]] * WRITERS
    assert sum(log.conflicts for log in logs) > 0, "EXACT writers raced; some conflicts were expected"
    assert sum(len(log.acknowledged) + log.conflicts for log in logs) == WRITERS * APPENDS_PER_WRITER
    # Gap-free global order; every acknowledged event exactly once, where its ack said, in call order.
    assert [e.global_position for e in everything] == list(range(1, len(everything) + 1))
    by_position = {e.global_position: e for e in everything}
    acknowledged_ids = []
    for log in logs:
        for ori_id, ids, first, last in log.acknowledged:
            assert [by_position[p].event_id for p in range(first, last + 1)] == ids
            assert {by_position[p].ori_id for p in range(first, last + 1)} == {ori_id}
            acknowledged_ids += ids
    assert sorted(acknowledged_ids) == sorted(e.event_id for e in everything)
    # Each stream's versions are contiguous and chained.
    for s in range(STREAMS):
        stream = [e for e in everything if e.ori_id == f"ori-{s}"]
        assert [e.stream_version for e in stream] == list(range(len(stream)))
        report = await stub.VerifyChain(biography_pb2.VerifyChainRequest(ori_id=f"ori-{s}"), metadata=AUTH)
        assert report.intact
    # Both subscribers saw exactly the log, in order.
    for received in seen:
        assert [e.event_id for e in received] == [e.event_id for e in everything]
