"""The behaviour layer behind the kernel's one call site: Lachesis steps at 10 Hz, replay stays exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egbe.v1 import action_pb2, common_pb2, kernel_pb2
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, replay
from tests.kernel_service.frames import WORLD, columns, make_kernel, registrations

NEARBY = 1 << 5
ON_SCREEN = 1 << 1
BEHAVIOUR_SOURCES = {action_pb2.ACTION_SOURCE_BEHAVIOR_TREE, action_pb2.ACTION_SOURCE_HTN}


def population_flags(agents: int) -> np.ndarray:
    flags = np.full(agents, NEARBY, dtype=np.uint16)
    flags[:4] |= ON_SCREEN  # a small Clotho scene
    return flags


def test_agents_step_their_behaviour_at_10_hz_on_their_phase() -> None:
    agents = 40
    kernel = make_kernel(agents, "c", behavior=True)
    flags = population_flags(agents)
    needs = np.linspace(0, 9_000, agents).astype(np.uint16)
    kernel.tick(columns(1, signal_flags=flags, need_sustaining_bp=needs))  # odd slots step at tick 1
    # Slot 0 (Clotho) holds a cognition-made action from here on: it is no longer stepped.
    said = action_pb2.ActionIntent(slot=0, kind=action_pb2.ACTION_KIND_SAY, priority=7_000)
    result = kernel.tick(columns(2, signal_flags=flags, need_sustaining_bp=needs), [said])
    sources = np.frombuffer(result.actions.columns.source, "u1")
    stepped = {slot for slot in range(agents) if sources[slot] in BEHAVIOUR_SOURCES}
    # Tick 1 stepped the odd slots, tick 2 the even ones: every agent without a cognition action acts.
    assert stepped == set(range(1, agents))
    assert sources[0] == action_pb2.ACTION_SOURCE_COGNITION
    result = kernel.tick(columns(4, signal_flags=flags, need_sustaining_bp=needs))
    assert np.frombuffer(result.actions.columns.source, "u1")[0] == action_pb2.ACTION_SOURCE_COGNITION
    tiers = np.frombuffer(result.actions.columns.tier, "u1")
    assert set(tiers[:4].tolist()) == {common_pb2.COGNITION_TIER_CLOTHO}
    assert set(tiers[4:].tolist()) == {common_pb2.COGNITION_TIER_LACHESIS}


def test_behaviour_steps_do_not_count_as_repeated_decisions() -> None:
    agents = 20
    kernel = make_kernel(agents, "c", behavior=True)
    flags = population_flags(agents)
    guards = [kernel.tick(columns(t, signal_flags=flags)).report.guard_interventions for t in range(1, 30)]
    assert sum(guards) == 0


def test_replay_with_the_behaviour_layer_is_byte_identical(tmp_path: Path) -> None:
    agents, log = 60, tmp_path / "ticks.log"
    config = KernelConfig()
    kernel = Kernel(config, select_core("c"), PersonalityBehaviorLayer())
    writer = TickLogWriter(log, kernel, snapshot_every_ticks=7)
    request = kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(agents))
    kernel.register(request.world_id, request.agents)
    writer.record_registration(request)
    rng = np.random.default_rng(3)
    for tick in range(1, 30):
        batch = columns(
            tick,
            signal_flags=population_flags(agents),
            need_safety_bp=rng.integers(0, 10_001, agents).astype(np.uint16),
            fatigue_bp=rng.integers(0, 10_001, agents).astype(np.uint16),
        )
        writer.record_tick(batch, [], kernel.tick(batch), kernel)
    writer.close()
    report = replay(log, Kernel(config, select_core("numpy"), PersonalityBehaviorLayer()))
    assert report.identical
    assert report.snapshots_checked == 4
