"""The tick log: record, replay byte for byte, snapshots, and detecting a divergent log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, deterministic_digest, read_records, replay
from tests.kernel_service.frames import WORLD, columns, registrations

AGENTS = 300


def scripted_batches(ticks: int) -> list[tuple[object, list[action_pb2.ActionIntent]]]:
    """A moving player: a band of agents near it changes every tick, so tiers, guards and calls vary."""
    rng = np.random.default_rng(7)
    batches = []
    for tick in range(1, ticks + 1):
        positions = np.arange(AGENTS) * 1_000
        player = (tick * 7_000) % (AGENTS * 1_000)
        proximity = np.abs(positions - player).astype(np.int32)
        flags = np.where(proximity < 60_000, 1 << 5, 0).astype(np.uint16)
        flags[rng.integers(0, AGENTS, 3)] |= 1 << 1
        if tick % 3:
            slots = np.sort(rng.choice(AGENTS, 40, replace=False)).astype(np.uint32)
            batch = columns(
                tick,
                slots=slots,
                signal_flags=flags[slots],
                player_proximity_mm=proximity[slots],
                goal_ref=np.full(40, 5, np.uint32),
            )
        else:
            batch = columns(tick, signal_flags=flags, player_proximity_mm=proximity)
        merged = [
            action_pb2.ActionIntent(slot=int(s), kind=action_pb2.ACTION_KIND_SAY, goal_ref=1, priority=5_000)
            for s in rng.choice(AGENTS, 2, replace=False)
        ]
        batches.append((batch, merged))
    return batches


def record(path: Path, core: str, ticks: int) -> list[bytes]:
    config = KernelConfig()
    kernel = Kernel(config, select_core(core))
    writer = TickLogWriter(path, kernel, snapshot_every_ticks=10)
    request = kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS))
    kernel.register(request.world_id, request.agents)
    writer.record_registration(request)
    digests = []
    for batch, merged in scripted_batches(ticks):
        result = kernel.tick(batch, merged)  # type: ignore[arg-type]
        writer.record_tick(batch, merged, result, kernel)  # type: ignore[arg-type]
        digests.append(deterministic_digest(result))
    writer.close()
    return digests


@pytest.mark.parametrize(("recorded_on", "replayed_on"), [("c", "c"), ("numpy", "c"), ("c", "numpy")])
def test_replay_reproduces_every_output_byte_for_byte(
    tmp_path: Path, recorded_on: str, replayed_on: str
) -> None:
    log = tmp_path / "ticks.log"
    digests = record(log, recorded_on, 45)
    assert len(set(digests)) == len(digests)  # the ticks really differ from one another
    report = replay(log, Kernel(KernelConfig(), select_core(replayed_on)))
    assert report.identical
    assert report.ticks == 45
    assert report.snapshots_checked == 4
    assert report.fingerprint == Kernel(KernelConfig(), select_core(recorded_on)).fingerprint.fnv1a64
    kinds = [r.WhichOneof("entry") for r in read_records(log)]
    assert kinds[:2] == ["config", "registration"]


def test_replay_names_the_first_divergent_tick(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    record(log, "c", 20)
    records = list(read_records(log))
    for record_ in records:
        if record_.WhichOneof("entry") == "tick" and record_.tick.batch.tick == 12:
            record_.tick.merged_results.add(slot=3, kind=action_pb2.ACTION_KIND_REST)
    tampered = tmp_path / "tampered.log"
    with tampered.open("wb") as stream:
        for record_ in records:
            data = record_.SerializeToString(deterministic=True)
            stream.write(bytes([len(data)]) if len(data) < 128 else _varint(len(data)))
            stream.write(data)
    report = replay(tampered, Kernel(KernelConfig(), select_core("c")))
    assert report.first_divergent_tick == 12


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_replay_refuses_a_different_config(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    record(log, "c", 2)
    with pytest.raises(ValueError, match="config"):
        replay(log, Kernel(KernelConfig(decision_interval_ticks=6), select_core("c")))


def test_snapshot_restore_continues_identically() -> None:
    batches = scripted_batches(30)
    original = Kernel(KernelConfig(), select_core("c"))
    original.register(WORLD, registrations(AGENTS))
    for batch, merged in batches[:15]:
        original.tick(batch, merged)  # type: ignore[arg-type]
    restored = Kernel(KernelConfig(), select_core("numpy"))
    restored.restore(original.snapshot())
    assert restored.snapshot() == original.snapshot()
    for batch, merged in batches[15:]:
        a = original.tick(batch, merged)  # type: ignore[arg-type]
        b = restored.tick(batch, merged)  # type: ignore[arg-type]
        a.report.core = b.report.core = ""
        assert deterministic_digest(a) == deterministic_digest(b)
