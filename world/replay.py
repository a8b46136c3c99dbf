"""`egbe replay`: re-runs a run's tick log through a fresh kernel and names the first divergent field.

The kernel's tick log holds each tick's input batch and the cognition results merged on it; the world's
result log holds every TickResult the kernel answered. A fresh kernel service, fed the logged ticks over
ReplayTicks, must answer the recorded results field for field (the measured elapsed time aside). The
world opens the logs and compares; whoever calls it starts that kernel (`assembly.world_runs`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from egbe.v1 import action_pb2, kernel_pb2
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


@dataclass
class ReplayLogs:
    """A run's logs opened for replay: the kernel config and records it logged, and what it answered."""

    run_dir: Path
    config: kernel_pb2.TickLogConfig
    records: Iterator[kernel_pb2.TickLogRecord]
    recorded: Iterator[action_pb2.TickResult]


def open_replay(run_dir: Path) -> ReplayLogs:
    """The run's tick log and result log, their framing checked whole before any kernel starts."""
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
    return ReplayLogs(run_dir, config, records, recorded)


async def compare_replay(logs: ReplayLogs, clients: ServiceClients) -> ReplayCheck:
    """Feeds the logs to a fresh kernel configured as `logs.config` recorded (no dispatcher targets,
    no log of its own): matches, or the first divergent field path with the recorded and replayed value."""
    run_dir, records, recorded = logs.run_dir, logs.records, logs.recorded
    index = 0
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
