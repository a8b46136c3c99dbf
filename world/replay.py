"""`egbe replay`: re-runs a run's tick log through a fresh kernel and names the first divergent field.

The kernel's tick log holds each tick's input batch and the cognition results merged on it; the world's
result log holds every TickResult the kernel answered. A fresh kernel service, fed the logged ticks over
ReplayTicks, must answer the recorded results field for field (the measured elapsed time aside).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

from egbe.v1 import action_pb2, kernel_pb2
from services.runtime import load_tokens, start_services, stop_services
from services.settings import EgbeSettings, Endpoint
from world.artifact import ArtifactError, ReplayCheck, read_artifact
from world.clients import ServiceClients
from world.divergence import first_divergence
from world.framing import FrameError, raw_frames, read_frames
from world.loop import WorldRunError, describe_rpc_error

ARTIFACT_FILE = "artifact.json"
RESULT_LOG_FILE = "results.bin"


def tick_log_summary(path: Path) -> tuple[str, int]:
    """SHA-256 over every frame's bytes, and how many frames the log holds (framing checked)."""
    digest = hashlib.sha256()
    frames = 0
    for data in raw_frames(path):
        digest.update(data)
        frames += 1
    return digest.hexdigest(), frames


def comparable(result: action_pb2.TickResult) -> action_pb2.TickResult:
    """The deterministic part of a result: the measured tick latency is not."""
    copy = action_pb2.TickResult()
    copy.CopyFrom(result)
    copy.report.elapsed_micros = 0
    copy.report.over_latency_budget = False
    return copy


def read_tick_log(path: Path) -> tuple[kernel_pb2.TickLogConfig, list[kernel_pb2.TickLogRecord]]:
    """The log's config and its records; a log without its config record is refused."""
    records = list(read_frames(path, kernel_pb2.TickLogRecord))
    if not records or records[0].WhichOneof("entry") != "config":
        raise FrameError(f"{path}: does not start with the kernel's config record; not a tick log")
    return records[0].config, records[1:]


@asynccontextmanager
async def fresh_kernel(
    settings: EgbeSettings, config: kernel_pb2.TickLogConfig
) -> AsyncIterator[ServiceClients]:
    """A kernel service of its own, configured as the log recorded, with no dispatcher targets and no log."""
    kernel_settings = settings.kernel
    recorded = type(kernel_settings.config).model_validate_json(config.canonical_json)
    with tempfile.TemporaryDirectory(prefix="egbe-replay-") as scratch:
        folder = Path(scratch)
        endpoints = dict(settings.endpoints)
        endpoints["kernel"] = Endpoint(port=0, unix_socket=folder / "kernel.sock")
        isolated = settings.model_copy(
            update={
                "data_dir": folder,
                "endpoints": endpoints,
                "kernel": kernel_settings.model_copy(
                    update={
                        "config": recorded,
                        "tick_log_path": None,
                        "gateway_target": None,
                        "biography_target": None,
                    }
                ),
            }
        )
        running = await start_services(["kernel"], isolated)
        targets = {name: endpoint.target() for name, endpoint in endpoints.items()}
        targets["kernel"] = running[0].target
        clients = ServiceClients.dial(targets, load_tokens(isolated), settings.max_message_bytes)
        try:
            yield clients
        finally:
            await clients.close()
            await stop_services(running, isolated)


def _requests(records: list[kernel_pb2.TickLogRecord]) -> Iterator[kernel_pb2.ReplayTicksRequest]:
    for record in records:
        if record.WhichOneof("entry") == "tick":
            yield kernel_pb2.ReplayTicksRequest(tick=record.tick)


async def _prepare(clients: ServiceClients, records: list[kernel_pb2.TickLogRecord]) -> None:
    """Registrations, and a snapshot logged before the first tick (a fork's starting state)."""
    for record in records:
        entry = record.WhichOneof("entry")
        if entry == "tick":
            return
        try:
            if entry == "registration":
                await clients.kernel.RegisterAgents(record.registration, metadata=clients.world_md)
            elif entry == "snapshot":
                await clients.kernel.RestoreSnapshot(
                    kernel_pb2.RestoreSnapshotRequest(snapshot=record.snapshot), metadata=clients.world_md
                )
        except grpc.aio.AioRpcError as exc:
            raise WorldRunError(describe_rpc_error(f"replaying the log's {entry}", exc)) from exc


async def replay_run(run_dir: Path, settings: EgbeSettings) -> ReplayCheck:
    """matches, or the first divergent field path with the recorded and the replayed value."""
    artifact = read_artifact(run_dir / ARTIFACT_FILE)
    if artifact.tick_log is None:
        raise ArtifactError(
            f"run {run_dir} recorded no kernel tick log (it ran against services it did not start)"
        )
    config, records = read_tick_log(run_dir / artifact.tick_log.path)
    recorded = list(read_frames(run_dir / RESULT_LOG_FILE, action_pb2.TickResult))
    ticks = sum(1 for r in records if r.WhichOneof("entry") == "tick")
    if ticks != len(recorded):
        raise FrameError(f"{run_dir}: the tick log holds {ticks} ticks but the result log {len(recorded)}")
    async with fresh_kernel(settings, config) as clients:
        await _prepare(clients, records)
        stream = clients.kernel.ReplayTicks(_requests(records), metadata=clients.world_md)
        index = 0
        try:
            async for reply in stream:
                expected = recorded[index]
                found = first_divergence(comparable(expected), comparable(reply.result))
                if found is not None:
                    stream.cancel()
                    return ReplayCheck(
                        checked=True,
                        matches=False,
                        divergence=f"results[{expected.report.tick}].{found.path}",
                        recorded=found.recorded,
                        fresh=found.fresh,
                        ticks_compared=index + 1,
                    )
                index += 1
        except grpc.aio.AioRpcError as exc:
            raise WorldRunError(describe_rpc_error(f"ReplayTicks at frame {index}", exc)) from exc
    return ReplayCheck(checked=True, matches=True, ticks_compared=index)
