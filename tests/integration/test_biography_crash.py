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
from services.subprocess_service import ServedProcess, serve_in_subprocess

KILL_AFTER_ACKS = 150
STREAMS = 3


def serve_biography(data_dir: Path, database_url: str | None) -> ServedProcess:
    return serve_in_subprocess(
        "biography", data_dir, {"EGBE_DATABASE_URL": database_url} if database_url else None
    )


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


async def _append_until_killed(served: ServedProcess, acknowledged: list[str]) -> None:
    """Keep appending from 3 concurrent clients; SIGKILL the server once enough appends were acknowledged."""
    metadata = bearer_metadata(served.token)

    async def client(n: int, stub: biography_pb2_grpc.BiographyServiceStub) -> None:
        for i in range(10_000):
            request, ids = _append(f"ori-{n}", 1 + i % 4)
            try:
                await stub.Append(request, metadata=metadata, timeout=10)
            except grpc.aio.AioRpcError:
                return  # the server is gone: this append was never acknowledged
            acknowledged.extend(ids)
            if len(acknowledged) >= KILL_AFTER_ACKS and served.process.poll() is None:
                served.process.send_signal(signal.SIGKILL)

    async with grpc.aio.insecure_channel(served.target) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)
        await asyncio.gather(*(client(n, stub) for n in range(STREAMS)))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_every_acknowledged_event_survives_a_sigkill(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("postgres_dsn") if backend == "postgres" else None
    served = serve_biography(tmp_path, database_url)
    acknowledged: list[str] = []
    try:
        await _append_until_killed(served, acknowledged)
    finally:
        served.process.kill()
        served.process.wait(timeout=30)
    assert served.process.returncode == -signal.SIGKILL
    assert len(acknowledged) >= KILL_AFTER_ACKS

    restarted = serve_biography(tmp_path, database_url)
    try:
        metadata = bearer_metadata(restarted.token)
        async with grpc.aio.insecure_channel(restarted.target) as channel:
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
        restarted.process.send_signal(signal.SIGTERM)
        restarted.process.wait(timeout=30)
