"""Cognition down for a whole simulated game-hour: every agent, every tier, acts in character every tick.

The real kernel (C core) with the real behaviour layer; no cognition result is ever merged, as when
the gateway or the cognition service is down. After the first behaviour step every Ori's action is
its own behaviour tree's or HTN plan's, or a kernel marker (PLAN / REFLECT / SUMMARIZE) that means
"the Ori holds that cached, in-character action while a call is pending".
"""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.tree_kernel import ROUTINE_KIND
from kernel_service.behavior.vocabulary import TRAIT_FIELDS, GoalFamily
from kernel_service.config import GAME_MINUTE_TICKS, KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from services.goal_refs import encode_goal_ref
from tests.kernel_service.frames import FAR_MM, WORLD, columns

A = action_pb2
AGENTS = 24
GAME_HOUR_TICKS = 60 * GAME_MINUTE_TICKS
PENDING_MARKERS = (A.ACTION_KIND_PLAN, A.ACTION_KIND_REFLECT, A.ACTION_KIND_SUMMARIZE)
BEHAVIOUR = (A.ACTION_SOURCE_BEHAVIOR_TREE, A.ACTION_SOURCE_HTN)


@pytest.mark.slow
def test_cognition_down_for_a_game_hour_every_agent_acts_in_character_every_tick() -> None:
    rng = np.random.default_rng(11)  # test data only
    layer = PersonalityBehaviorLayer()
    kernel = Kernel(KernelConfig(), select_core("c"), behavior=layer)
    kernel.register(
        WORLD,
        [
            kernel_pb2.AgentRegistration(
                ori=common_pb2.OriRef(tenant_id="t", world_id=WORLD, ori_id=f"ori-{i}"),
                traits=kernel_pb2.PersonalityTraits(
                    **{f: int(rng.integers(0, 10_001)) for f in TRAIT_FIELDS}
                ),
                values=[
                    kernel_pb2.RankedValue(domain=d, weight_bp=int(rng.integers(0, 10_001)))
                    for d in range(1, 10)
                ],
                vocation_ref=i % 2,
            )
            for i in range(AGENTS)
        ],
    )
    # Near a player or on screen (Clotho), in the player's world (Lachesis), distant (Atropos).
    proximity = np.full(AGENTS, FAR_MM, dtype=np.int32)
    proximity[:6] = 1_500
    flags = np.zeros(AGENTS, dtype=np.uint16)
    flags[6:10] = 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN
    flags[10:18] = 1 << perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD
    station = layer.library.tag_bit("station-known")
    goals = np.array(
        [0, encode_goal_ref(GoalFamily.VOCATION, station, 1), encode_goal_ref(GoalFamily.TRAVEL, 0, 2)]
    )
    needs = {
        name: rng.integers(0, 10_001, AGENTS)
        for name in (
            "need_safety_bp",
            "need_sustaining_bp",
            "need_social_bp",
            "need_purpose_bp",
            "fatigue_bp",
        )
    }
    goal_ref = rng.choice(goals, AGENTS)
    first_step = KernelConfig().lachesis_step_every_ticks
    tiers_seen: set[int] = set()
    cached_source = kernel.arrays.fields["cached_source"]
    cached_kind = kernel.arrays.fields["cached_kind"]
    for tick in range(1, GAME_HOUR_TICKS + 1):
        if tick % GAME_MINUTE_TICKS == 1:  # the world shifts once a game-minute
            movers = rng.random(AGENTS) < 0.3
            for values in needs.values():
                values[movers] = rng.integers(0, 10_001, int(movers.sum()))
            goal_ref[movers] = rng.choice(goals, int(movers.sum()))
            batch = columns(
                tick, player_proximity_mm=proximity, signal_flags=flags, goal_ref=goal_ref, **needs
            )
        batch.tick = tick
        # The world reports goal progress every tick, so the stale-goal guard stays quiet.
        batch.columns.goal_progress_signature = np.full(AGENTS, tick, dtype="<u8").tobytes()
        result = kernel.tick(batch)
        out = result.actions.columns
        assert out.count == AGENTS
        kind = np.frombuffer(out.kind, dtype=np.uint8)
        source = np.frombuffer(out.source, dtype=np.uint8)
        assert (kind != A.ACTION_KIND_UNSPECIFIED).all(), tick
        if tick < first_step:
            continue
        held = cached_source[:AGENTS]
        assert ((held == BEHAVIOUR[0]) | (held == BEHAVIOUR[1])).all(), tick
        from_tree = held == A.ACTION_SOURCE_BEHAVIOR_TREE
        assert (
            cached_kind[:AGENTS][from_tree] == ROUTINE_KIND[layer.tree_routine[:AGENTS][from_tree]]
        ).all(), tick
        acting = (source == BEHAVIOUR[0]) | (source == BEHAVIOUR[1]) | (kind == PENDING_MARKERS[0])
        acting |= (kind == PENDING_MARKERS[1]) | (kind == PENDING_MARKERS[2])
        assert acting.all(), (tick, kind[~acting], source[~acting])
        if tick % GAME_MINUTE_TICKS == 0:
            tiers_seen.update(np.frombuffer(out.tier, dtype=np.uint8).tolist())
    assert result.report is not None
    assert tiers_seen == {
        common_pb2.COGNITION_TIER_CLOTHO,
        common_pb2.COGNITION_TIER_LACHESIS,
        common_pb2.COGNITION_TIER_ATROPOS,
    }
