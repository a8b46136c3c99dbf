"""The world's own deterministic state and its step: the player walks, Ori act on the kernel's answers.

Everything here is a pure function of the scenario, the seed, the tick and the actions applied; draws
come from `world.rng` keyed by (seed, tick, ori, purpose). No clock is read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from egbe.v1 import action_pb2
from world.population import Population
from world.rng import uniform
from world.scenario import TICK_HZ, Scenario

ORI_SPEED_MM_PER_TICK = 50  # a 1 m/s stroll at 20 Hz
NEED_STEP_EVERY_TICKS = TICK_HZ  # needs move once a game-second, staggered by row
NEED_RISE_BP = 6  # per game-second while not tended
NEED_RELIEF_BP = 40  # per game-second while tended
WANDER_RADIUS_MM = 15_000
ARRIVED_MM = 300

# Which need an action tends: columns of Population.needs (safety, sustaining, social, purpose, fatigue).
_TENDS = {
    action_pb2.ACTION_KIND_MAINTAIN_SAFETY: 0,
    action_pb2.ACTION_KIND_SELF_CARE: 1,
    action_pb2.ACTION_KIND_SOCIALIZE: 2,
    action_pb2.ACTION_KIND_WORK: 3,
    action_pb2.ACTION_KIND_REST: 4,
}
_GO_HOME = (
    action_pb2.ACTION_KIND_REST,
    action_pb2.ACTION_KIND_SELF_CARE,
    action_pb2.ACTION_KIND_MAINTAIN_SAFETY,
)
_WANDER = (action_pb2.ACTION_KIND_MOVE, action_pb2.ACTION_KIND_EXPLORE)
# Actions pursuing a goal the world sees progress on; the rest (observe, say, plan, reflect) hold none.
GOAL_KINDS = np.array(sorted({*_TENDS, *_WANDER, action_pb2.ACTION_KIND_USE_PROP}), dtype=np.uint8)
ACTION_KIND_COUNT = max(action_pb2.ActionKind.values()) + 1


@dataclass
class WorldState:
    """Mutable arrays, row i = Ori i; copied whole into snapshots."""

    tick: int
    ori_xy: npt.NDArray[np.int64]
    target_xy: npt.NDArray[np.int64]
    needs: npt.NDArray[np.int32]
    kind: npt.NDArray[np.uint8]
    progress: npt.NDArray[np.uint64]
    player_xy: npt.NDArray[np.int64]

    def copy(self) -> WorldState:
        return WorldState(
            self.tick,
            self.ori_xy.copy(),
            self.target_xy.copy(),
            self.needs.copy(),
            self.kind.copy(),
            self.progress.copy(),
            self.player_xy.copy(),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "tick": self.tick,
            "ori_xy": self.ori_xy.tolist(),
            "target_xy": self.target_xy.tolist(),
            "needs": self.needs.tolist(),
            "kind": self.kind.tolist(),
            "progress": self.progress.tolist(),
            "player_xy": self.player_xy.tolist(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> WorldState:
        def arr(name: str, dtype: type[np.generic]) -> npt.NDArray[np.generic]:
            return np.array(raw[name], dtype=dtype)

        tick = raw["tick"]
        if not isinstance(tick, int):
            raise ValueError("world snapshot: tick must be an integer")
        return cls(
            tick,
            arr("ori_xy", np.int64).reshape(-1, 2),  # type: ignore[arg-type]
            arr("target_xy", np.int64).reshape(-1, 2),  # type: ignore[arg-type]
            arr("needs", np.int32),  # type: ignore[arg-type]
            arr("kind", np.uint8),  # type: ignore[arg-type]
            arr("progress", np.uint64),  # type: ignore[arg-type]
            arr("player_xy", np.int64),  # type: ignore[arg-type]
        )


def initial_state(scenario: Scenario, population: Population) -> WorldState:
    start = next(loc for loc in scenario.map.locations if loc.id == scenario.player.start)
    return WorldState(
        tick=0,
        ori_xy=population.home_xy.copy(),
        target_xy=population.home_xy.copy(),
        needs=population.needs.copy(),
        kind=np.zeros(population.size, dtype=np.uint8),
        progress=np.zeros(population.size, dtype=np.uint64),
        player_xy=np.array([start.at.x_mm, start.at.y_mm], dtype=np.int64),
    )


class WorldStepper:
    """Advances a WorldState one tick given the actions the kernel answered for the previous one."""

    def __init__(self, scenario: Scenario, population: Population, seed: int) -> None:
        self.scenario = scenario
        self.population = population
        self.seed = seed
        where = {loc.id: loc for loc in scenario.map.locations}
        self._waypoints = [
            (wp.at_tick, np.array([where[wp.location].at.x_mm, where[wp.location].at.y_mm], dtype=np.int64))
            for wp in scenario.player.path
        ]
        self._rows = np.arange(population.size, dtype=np.int64)

    def player_goal(self, tick: int) -> npt.NDArray[np.int64] | None:
        goal = None
        for at_tick, xy in self._waypoints:
            if at_tick <= tick:
                goal = xy
        return goal

    def apply_actions(self, state: WorldState, kind: npt.NDArray[np.uint8]) -> None:
        """Ori whose action changed pick where to go; the choice depends on their own dice only."""
        changed = kind != state.kind
        state.kind = kind.copy()
        if not changed.any():
            return
        pop = self.population
        home = changed & np.isin(kind, _GO_HOME)
        state.target_xy[home] = pop.home_xy[home]
        work = changed & (kind == action_pb2.ACTION_KIND_WORK)
        state.target_xy[work] = pop.work_xy[work]
        social = changed & (kind == action_pb2.ACTION_KIND_SOCIALIZE) & (pop.partner >= 0)
        state.target_xy[social] = state.ori_xy[pop.partner[social]]
        self._retarget_wanderers(state, changed & np.isin(kind, _WANDER))

    def _retarget_wanderers(self, state: WorldState, wander: npt.NDArray[np.bool_]) -> None:
        """A point near home, from each wanderer's own dice for this tick."""
        if not wander.any():
            return
        pop = self.population
        keys = pop.keys[wander]
        angle = uniform(self.seed, state.tick, keys, "wander-angle") * (2.0 * np.pi)
        reach = uniform(self.seed, state.tick, keys, "wander-reach") * WANDER_RADIUS_MM
        offset = np.stack([np.cos(angle) * reach, np.sin(angle) * reach], axis=1).astype(np.int64)
        state.target_xy[wander] = pop.home_xy[wander] + offset

    def advance(self, state: WorldState) -> None:
        """Move everyone one tick and let needs drift; then the tick counter moves on."""
        state.tick += 1
        delta = state.target_xy - state.ori_xy
        dist = np.hypot(delta[:, 0], delta[:, 1])
        moving = dist > ARRIVED_MM
        if moving.any():
            step = np.minimum(dist[moving], ORI_SPEED_MM_PER_TICK) / dist[moving]
            state.ori_xy[moving] += np.rint(delta[moving] * step[:, None]).astype(np.int64)
        tending = np.isin(state.kind, list(_TENDS))
        # Progress: walking toward the goal, or doing it once there; a wanderer who arrives walks on.
        state.progress[moving | tending] += np.uint64(1)
        self._retarget_wanderers(state, ~moving & np.isin(state.kind, _WANDER))
        due = (self._rows + state.tick) % NEED_STEP_EVERY_TICKS == 0
        if due.any():
            needs = state.needs[due]
            needs += NEED_RISE_BP
            kinds = state.kind[due]
            for action_kind, column in _TENDS.items():
                tended = kinds == action_kind
                needs[tended, column] -= NEED_RISE_BP + NEED_RELIEF_BP
            state.needs[due] = np.clip(needs, 0, 10_000)
        goal = self.player_goal(state.tick)
        if goal is not None:
            to_goal = goal - state.player_xy
            length = float(np.hypot(to_goal[0], to_goal[1]))
            if length > 0:
                speed = self.scenario.player.speed_mm_per_tick
                step_xy = to_goal if length <= speed else np.rint(to_goal * (speed / length)).astype(np.int64)
                state.player_xy = state.player_xy + step_xy
