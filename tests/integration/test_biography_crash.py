"""SIGKILL `egbe serve biography` in the middle of a stream of appends: every acknowledged event survives."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import grpc
import pytest

from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses

KILL_AFTER_ACKS = 150
STREAMS = 3


def _append(ori_id: str, count: int) -> tuple[biography_pb2.AppendRequest, list[str]]:
    events = []
    for k in range(count):
        event = biography_pb2.NewOriEvent(
            event_id=str(uuid.uuid4()), kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, world_tick=k
        )
        event.payload.update({"text": f"{ori_id} {k}"})
        events.append(event)
    request = biography_pb2.AppendRequest(
        ori_id=ori_id,
        expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
        events=events,
    )
    return request, [e.event_id for e in events]


async def _append_until_killed(cluster: ServiceProcesses, acknowledged: list[str]) -> None:
    """Keep appending from 3 concurrent clients; SIGKILL the server once enough appends were acknowledged."""
    metadata = bearer_metadata(cluster.tokens["service"])
    process = cluster.running["biography"]

    async def client(n: int, stub: biography_pb2_grpc.BiographyServiceStub) -> None:
        for i in range(10_000):
            request, ids = _append(f"ori-{n}", 1 + i % 4)
            try:
                await stub.Append(request, metadata=metadata, timeout=10)
            except grpc.aio.AioRpcError:
                return  # the server is gone: this append was never acknowledged
            acknowledged.extend(ids)
            if len(acknowledged) >= KILL_AFTER_ACKS and process.poll() is None:
                process.send_signal(signal.SIGKILL)

    async with grpc.aio.insecure_channel(cluster.target("biography")) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)
        await asyncio.gather(*(client(n, stub) for n in range(STREAMS)))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_every_acknowledged_event_survives_a_sigkill(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("postgres_dsn") if backend == "postgres" else None
    cluster = ServiceProcesses(tmp_path, database_url)
    cluster.start("biography")
    killed = cluster.running["biography"]
    acknowledged: list[str] = []
    try:
        await _append_until_killed(cluster, acknowledged)
    finally:
        cluster.kill("biography")
    assert killed.returncode == -signal.SIGKILL
    assert len(acknowledged) >= KILL_AFTER_ACKS

    cluster.start("biography")  # the same data directory, ports and tokens
    try:
        metadata = bearer_metadata(cluster.tokens["service"])
        async with grpc.aio.insecure_channel(cluster.target("biography")) as channel:
            stub = biography_pb2_grpc.BiographyServiceStub(channel)
            stored: list[biography_pb2.OriEvent] = []
            token = ""
            while True:
                page = await stub.Read(
                    biography_pb2.ReadRequest(ori_id="$all", page_size=1000, page_token=token),
                    metadata=metadata,
                )
                stored += page.events
                token = page.next_page_token
                if not token:
                    break
            assert set(acknowledged) <= {e.event_id for e in stored}
            assert [e.global_position for e in stored] == list(range(1, len(stored) + 1))
            for n in range(STREAMS):
                report = await stub.VerifyChain(
                    biography_pb2.VerifyChainRequest(ori_id=f"ori-{n}"), metadata=metadata
                )
                assert report.intact, report.detail
            # The restarted service keeps appending where the log left off.
            request_after, _ = _append("ori-0", 1)
            answer = await stub.Append(request_after, metadata=metadata)
            assert answer.last_global_position == len(stored) + 1
    finally:
        assert cluster.stop_all() == {"biography": 0}
