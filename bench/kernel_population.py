"""A mixed population for the kernel benchmarks: Lachesis residents, a Clotho scene, a walking player."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import common_pb2, kernel_pb2, perception_pb2

WORLD = "bench-world"
NEARBY = 1 << perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD
ON_SCREEN = 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN
SCENE = 1 << perception_pb2.PERCEPTION_FLAG_BIT_SCENE_COPRESENCE


def registrations(agents: int, first: int = 0) -> list[kernel_pb2.AgentRegistration]:
    """Ori `first` .. `first + agents - 1`."""
    return [
        kernel_pb2.AgentRegistration(
            ori=common_pb2.OriRef(tenant_id="bench", world_id=WORLD, ori_id=f"ori-{i}")
        )
        for i in range(first, first + agents)
    ]


def frames(agents: int, count: int, seed: int = 7) -> list[dict[str, NDArray[np.generic]]]:
    """`count` successive full frames: one live scene of the seed's 200 agents (fewer below 10,200 agents,
    2%) in Clotho, the rest residents near the player (Lachesis), 1% offline (Atropos). The player walks
    400 mm a tick along a 10 km line, so agents cross the 2,500 mm boundary and tiers change."""
    rng = np.random.default_rng(seed)
    position = rng.integers(0, 10_000_000, agents).astype(np.int64)  # along 10 km
    scene = np.zeros(agents, dtype=bool)
    scene[rng.choice(agents, max(1, min(200, agents * 2 // 102)), replace=False)] = True
    offline = rng.random(agents) < 0.01
    goal = rng.integers(0, 50, agents).astype(np.uint32)
    out = []
    for index in range(count):
        player = 5_000_000 + index * 400  # a walking player, 400 mm per tick
        proximity = np.minimum(np.abs(position - player), 2**31 - 1).astype(np.int32)
        proximity[scene] = rng.integers(0, 5_000, int(scene.sum()))
        flags = np.full(agents, NEARBY, dtype=np.uint16)
        flags[scene] |= SCENE
        flags[scene & (rng.random(agents) < 0.5)] |= ON_SCREEN
        flags[offline] = 0
        progress = (np.arange(agents, dtype=np.uint64) + np.uint64(index // 3)).astype(np.uint64)
        out.append(
            {
                "signal_flags": flags,
                "player_proximity_mm": proximity,
                "goal_ref": goal,
                "goal_progress_signature": progress,
            }
        )
    return out
