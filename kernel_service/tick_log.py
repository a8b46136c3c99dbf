"""The tick log: varint-length-delimited TickLogRecord frames, written as ticks run and replayed later."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from egbe.v1 import action_pb2, kernel_pb2, perception_pb2
from kernel_service.kernel import Kernel


def deterministic_digest(result: action_pb2.TickResult) -> bytes:
    """SHA-256 of the result minus what is measured or names the implementation (elapsed time, core).

    That remainder is what replay must reproduce, on either core.
    """
    copy = action_pb2.TickResult()
    copy.CopyFrom(result)
    copy.report.elapsed_micros = 0
    copy.report.over_latency_budget = False
    copy.report.core = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).digest()


def _write_varint(stream: BinaryIO, value: int) -> None:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            break
    stream.write(bytes(out))


def _read_varint(stream: BinaryIO) -> int | None:
    shift = 0
    value = 0
    while True:
        raw = stream.read(1)
        if not raw:
            if shift:
                raise ValueError("tick log ends inside a frame length")
            return None
        value |= (raw[0] & 0x7F) << shift
        if not raw[0] & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("tick log frame length is not a varint")


def read_records(path: Path) -> Iterator[kernel_pb2.TickLogRecord]:
    """Every frame of a tick log, in order."""
    with path.open("rb") as stream:
        while (length := _read_varint(stream)) is not None:
            data = stream.read(length)
            if len(data) != length:
                raise ValueError(f"tick log {path} is truncated")
            yield kernel_pb2.TickLogRecord.FromString(data)


class TickLogWriter:
    """Appends the config once, then registrations, ticks and periodic snapshots."""

    def __init__(self, path: Path, kernel: Kernel, snapshot_every_ticks: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = path.open("ab")
        self._snapshot_every = snapshot_every_ticks
        self._ticks = 0
        methods = kernel.behavior.fingerprint_inputs() if kernel.behavior is not None else {}
        self._write(
            kernel_pb2.TickLogRecord(
                config=kernel_pb2.TickLogConfig(
                    fingerprint=kernel.fingerprint,
                    canonical_json=kernel.config.model_dump_json(),
                    core=kernel.core.name,
                    methods_library_version=methods.get("library_version", ""),
                )
            )
        )

    def _write(self, record: kernel_pb2.TickLogRecord) -> None:
        data = record.SerializeToString(deterministic=True)
        _write_varint(self._stream, len(data))
        self._stream.write(data)

    def record_registration(self, request: kernel_pb2.RegisterAgentsRequest) -> None:
        self._write(kernel_pb2.TickLogRecord(registration=request))
        self._stream.flush()

    def record_tick(
        self,
        batch: perception_pb2.PerceptionBatch,
        merged: Sequence[action_pb2.ActionIntent],
        result: action_pb2.TickResult,
        kernel: Kernel,
        cognition_unavailable_tiers: int = 0,
    ) -> None:
        self._write(
            kernel_pb2.TickLogRecord(
                tick=kernel_pb2.TickLogTick(
                    batch=batch,
                    merged_results=merged,
                    result_sha256=deterministic_digest(result),
                    cognition_unavailable_tiers=cognition_unavailable_tiers,
                )
            )
        )
        self._ticks += 1
        if self._ticks % self._snapshot_every == 0:
            self._write(kernel_pb2.TickLogRecord(snapshot=kernel.snapshot()))
        self._stream.flush()

    def record_snapshot(self, snapshot: kernel_pb2.KernelSnapshot) -> None:
        """A restored state: ticks after it continue from it."""
        self._write(kernel_pb2.TickLogRecord(snapshot=snapshot))
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()


@dataclass(frozen=True)
class ReplayReport:
    """What replaying a log found: ticks replayed and the first tick whose output differs, if any."""

    ticks: int
    snapshots_checked: int
    first_divergent_tick: int | None
    fingerprint: str

    @property
    def identical(self) -> bool:
        return self.first_divergent_tick is None


def replay(path: Path, kernel: Kernel) -> ReplayReport:
    """Feed a log through a fresh kernel; every tick's digest and every snapshot must match."""
    ticks = 0
    snapshots = 0
    divergent: int | None = None
    fingerprint = ""
    for record in read_records(path):
        entry = record.WhichOneof("entry")
        if entry == "config":
            fingerprint = record.config.fingerprint.fnv1a64
            if fingerprint != kernel.fingerprint.fnv1a64:
                raise ValueError(
                    f"log recorded config {fingerprint}, kernel runs {kernel.fingerprint.fnv1a64}"
                )
        elif entry == "registration":
            kernel.register(record.registration.world_id, record.registration.agents)
        elif entry == "tick":
            result = kernel.tick(
                record.tick.batch, record.tick.merged_results, record.tick.cognition_unavailable_tiers
            )
            ticks += 1
            if divergent is None and deterministic_digest(result) != record.tick.result_sha256:
                divergent = record.tick.batch.tick
        elif entry == "snapshot":
            snapshots += 1
            if divergent is None and kernel.snapshot().SerializeToString(
                deterministic=True
            ) != record.snapshot.SerializeToString(deterministic=True):
                divergent = kernel.last_tick
    return ReplayReport(ticks, snapshots, divergent, fingerprint)
