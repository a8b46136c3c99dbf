"""A simulated game-hour with cognition down: the layer gives every agent an in-character action every tick.

This is the behaviour layer's half of the kernel-wide outage test (the kernel's tick path, which
routes every tier to this layer when cognition is unavailable, owns the other half).
"""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.behavior import PersonalityBehaviorLayer
from kernel_service.behavior.arbitration import Arbitration, arbitrate_rows
from kernel_service.behavior.goal_refs import encode_goal_ref
from kernel_service.behavior.tree_kernel import ROUTINE_KIND
from kernel_service.behavior.vocabulary import MINOR_PRESENT_FLAG, THREAT_FLAG, TRAIT_FIELDS, GoalFamily
from kernel_service.behavior_seam import BehaviorDecisions, BehaviorSignals

TICK_HZ = 20
GAME_HOUR_TICKS = 3_600 * TICK_HZ
AGENTS = 64


@pytest.mark.slow
def test_every_agent_acts_in_character_every_tick_for_a_game_hour_without_cognition() -> None:
    rng = np.random.default_rng(2026)  # test data only; the layer itself reads no RNG
    layer = PersonalityBehaviorLayer(capacity=AGENTS)
    layer.register(
        0,
        [
            kernel_pb2.AgentRegistration(
                traits=kernel_pb2.PersonalityTraits(
                    **{f: int(rng.integers(0, 10_001)) for f in TRAIT_FIELDS}
                ),
                values=[
                    kernel_pb2.RankedValue(domain=d, weight_bp=int(rng.integers(0, 10_001)))
                    for d in range(1, 10)
                ],
                vocation_ref=int(rng.integers(0, 2)),
            )
            for _ in range(AGENTS)
        ],
    )
    goals = np.array(
        [
            0,
            encode_goal_ref(GoalFamily.VOCATION, layer.library.tag_bit("station-known"), 1),
            encode_goal_ref(GoalFamily.VOCATION, 0, 2),
            encode_goal_ref(GoalFamily.SOCIAL, layer.library.tag_bit("relationship-repair"), 3),
            encode_goal_ref(GoalFamily.TRAVEL, 0, 4),
        ],
        dtype=np.uint32,
    )
    u16 = np.zeros(AGENTS, dtype=np.uint16)
    signals = BehaviorSignals(
        u16.copy(), u16.copy(), u16.copy(), u16.copy(), u16.copy(), u16.copy(), np.zeros(AGENTS, np.uint32)
    )
    out = BehaviorDecisions(
        np.zeros(AGENTS, np.uint8),
        np.zeros(AGENTS, np.uint8),
        np.zeros(AGENTS, np.uint32),
        u16.copy(),
        u16.copy(),
    )
    slots = np.arange(AGENTS, dtype=np.uint32)
    cognition_down = np.zeros(AGENTS, dtype=np.bool_)
    sources = {action_pb2.ACTION_SOURCE_BEHAVIOR_TREE, action_pb2.ACTION_SOURCE_HTN}
    seen_sources: set[int] = set()
    for tick in range(GAME_HOUR_TICKS):
        if tick % TICK_HZ == 0:  # the world changes once a game-second
            movers = rng.random(AGENTS) < 0.2
            for column in (
                signals.need_safety_bp,
                signals.need_sustaining_bp,
                signals.need_social_bp,
                signals.need_purpose_bp,
                signals.fatigue_bp,
            ):
                column[movers] = rng.integers(0, 10_001, int(movers.sum()))
            signals.signal_flags[movers] = rng.choice(
                [0, 0, 0, THREAT_FLAG, MINOR_PRESENT_FLAG], int(movers.sum())
            )
            signals.goal_ref[movers] = rng.choice(goals, int(movers.sum()))
            novelty = rng.random(AGENTS) < 0.1
        out.kind[:] = 0
        layer.decide(slots, signals, out)
        verdict = arbitrate_rows(cognition_down, novelty, signals.goal_ref != 0, layer.method_applies(slots))
        assert (verdict == Arbitration.BEHAVIOR_TREE).all()
        assert (out.kind != action_pb2.ACTION_KIND_UNSPECIFIED).all(), tick
        from_tree = out.source == action_pb2.ACTION_SOURCE_BEHAVIOR_TREE
        # In character: a tree action is the agent's own routine; a plan action is its plan's step.
        assert (out.kind[from_tree] == ROUTINE_KIND[layer.tree_routine[from_tree]]).all(), tick
        assert (out.source[~from_tree] == action_pb2.ACTION_SOURCE_HTN).all(), tick
        if tick % TICK_HZ == 0:
            seen_sources.update(np.unique(out.source).tolist())
    assert seen_sources == sources
