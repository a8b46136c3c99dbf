"""`egbe replay`: re-runs a run's tick log through a fresh kernel and names the first divergent field.

The kernel's tick log holds each tick's input batch and the cognition results merged on it; the world's
result log holds every TickResult the kernel answered. A fresh kernel service, fed the logged ticks over
ReplayTicks, must answer the recorded results field for field (the measured elapsed time aside).
"""

from __future__ import annotations

import asyncio
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
from world.errors import WorldRunError, describe_rpc_error
from world.framing import FrameError, raw_frames, read_frames
from world.run_folder import ARTIFACT_FILE, RESULT_LOG_FILE


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


def read_tick_log(path: Path) -> tuple[kernel_pb2.TickLogConfig, Iterator[kernel_pb2.TickLogRecord]]:
    """The log's config, then its records as they are read; a log without its config record is refused."""
    records = read_frames(path, kernel_pb2.TickLogRecord)
    first = next(records, None)
    if first is None or first.WhichOneof("entry") != "config":
        raise FrameError(f"{path}: does not start with the kernel's config record; not a tick log")
    return first.config, records


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
        clients = ServiceClients.dial(targets, load_tokens(isolated), isolated)
        try:
            yield clients
        finally:
            await clients.close()
            await stop_services(running, isolated)


class _LogFeed:
    """Feeds logged ticks to the stream; keeps a log error so it surfaces instead of a bare cancellation."""

    def __init__(self, first: kernel_pb2.TickLogRecord, rest: Iterator[kernel_pb2.TickLogRecord]) -> None:
        self.first = first
        self.rest = rest
        self.error: FrameError | None = None

    def requests(self) -> Iterator[kernel_pb2.ReplayTicksRequest]:
        yield kernel_pb2.ReplayTicksRequest(tick=self.first.tick)
        try:
            for record in self.rest:
                if record.WhichOneof("entry") == "tick":
                    yield kernel_pb2.ReplayTicksRequest(tick=record.tick)
        except FrameError as exc:
            self.error = exc
            raise


def without_identities(request: kernel_pb2.RegisterAgentsRequest) -> kernel_pb2.RegisterAgentsRequest:
    """The logged registration minus each Ori's identity: ticks replay without a biography (no tick
    reads an identity), and the run already recorded the identities in its own."""
    copy = kernel_pb2.RegisterAgentsRequest()
    copy.CopyFrom(request)
    for agent in copy.agents:
        agent.ClearField("identity")
    return copy


async def _prepare(
    clients: ServiceClients, records: Iterator[kernel_pb2.TickLogRecord]
) -> kernel_pb2.TickLogRecord | None:
    """Registrations, and a snapshot logged before the first tick (a fork's start); returns the first tick."""
    for record in records:
        entry = record.WhichOneof("entry")
        if entry == "tick":
            return record
        try:
            if entry == "registration":
                await clients.kernel.RegisterAgents(
                    without_identities(record.registration), metadata=clients.world_md
                )
            elif entry == "snapshot":
                await clients.kernel.RestoreSnapshot(
                    kernel_pb2.RestoreSnapshotRequest(snapshot=record.snapshot), metadata=clients.world_md
                )
        except grpc.aio.AioRpcError as exc:
            raise WorldRunError(describe_rpc_error(f"replaying the log's {entry}", exc)) from exc
    return None


async def replay_run(run_dir: Path, settings: EgbeSettings) -> ReplayCheck:
    """matches, or the first divergent field path with the recorded and the replayed value."""
    artifact = read_artifact(run_dir / ARTIFACT_FILE)
    if artifact.tick_log is None:
        raise ArtifactError(
            f"run {run_dir} recorded no kernel tick log (it ran against services it did not start)"
        )
    log = run_dir / artifact.tick_log.path
    tick_log_summary(log)  # framing first: a truncated log is named before any kernel starts
    tick_log_summary(run_dir / RESULT_LOG_FILE)
    config, records = read_tick_log(log)
    recorded = read_frames(run_dir / RESULT_LOG_FILE, action_pb2.TickResult, compressed=True)
    index = 0
    async with fresh_kernel(settings, config) as clients:
        first = await _prepare(clients, records)
        if first is None:
            return ReplayCheck(checked=True, matches=True, ticks_compared=0)
        feed = _LogFeed(first, records)
        stream = clients.kernel.ReplayTicks(feed.requests(), metadata=clients.world_md)
        try:
            async for reply in stream:
                expected = next(recorded, None)
                if expected is None:
                    raise FrameError(f"{run_dir}: the result log ends before the tick log (at tick {index})")
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
        except asyncio.CancelledError:
            if feed.error is not None:
                raise feed.error from None
            raise
    if next(recorded, None) is not None:
        raise FrameError(f"{run_dir}: the result log holds more ticks than the tick log ({index})")
    return ReplayCheck(checked=True, matches=True, ticks_compared=index)
