"""The game-hour demand the saturation check sends the gateway, from tier occupancy alone."""

from __future__ import annotations

from collections import Counter

import numpy as np

from egbe.v1 import common_pb2
from world.collect import hour_demand
from world.loop import TIER_COUNT, LoopRecording


def test_the_launch_ceiling_population_asks_for_its_budget_units() -> None:
    window = 600
    recording = LoopRecording(world_id="w", ticks=list(range(window)))
    tier_ticks = np.zeros((1_424, TIER_COUNT), dtype=np.int64)
    tier_ticks[:24, common_pb2.COGNITION_TIER_CLOTHO] = window
    tier_ticks[24:424, common_pb2.COGNITION_TIER_LACHESIS] = window - 3  # damping holds a few ticks
    tier_ticks[24:424, common_pb2.COGNITION_TIER_ATROPOS] = 3
    tier_ticks[424:, common_pb2.COGNITION_TIER_ATROPOS] = window
    recording.tier_ticks = tier_ticks
    requests = hour_demand(recording, [f"ori-{i}" for i in range(1_424)])
    per_tier = Counter(r.tier for r in requests)
    assert per_tier == {
        common_pb2.COGNITION_TIER_CLOTHO: 24 * 60,  # active-minutes in a game-hour
        common_pb2.COGNITION_TIER_LACHESIS: 400 * 6,  # one reflection every 10 game-minutes
        common_pb2.COGNITION_TIER_ATROPOS: 1_000,  # one game-day budget per distant Ori
    }
    assert {r.ori_id for r in requests if r.tier == common_pb2.COGNITION_TIER_ATROPOS} == {
        f"ori-{i}" for i in range(424, 1_424)
    }
