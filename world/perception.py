"""Turns the world's geometry and script into the kernel's perception batches: rows, columns or deltas."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from egbe.v1 import perception_pb2
from services.column_layout import (
    LAYOUT_VERSION,
    PERCEPTION_COLUMNS,
    PERCEPTION_FLAG_BITS,
    SLOT_DTYPE,
)
from world.population import Population
from world.scenario import Scenario
from world.script import ScriptIndex
from world.simulation import GOAL_KINDS, WorldState

NO_PLAYER_MM = 2_147_483_647
NEAR_LOD_MM = 5_000


@dataclass
class Perception:
    """One tick's signals for every Ori, as arrays in row (= slot) order, and the few Ori's situations."""

    tick: int
    arrays: dict[str, npt.NDArray[np.generic]]
    situations: list[perception_pb2.SituationText] = field(default_factory=list)

    def flag(self, name: str) -> npt.NDArray[np.bool_]:
        bits = self.arrays["signal_flags"].astype(np.uint32)
        return ((bits >> PERCEPTION_FLAG_BITS[name]) & 1).astype(np.bool_)


def build_perception(
    scenario: Scenario, population: Population, script: ScriptIndex, state: WorldState
) -> Perception:
    """Signals for `state.tick`: distances to the player in millimetres, flags from the script, and
    the situation text of the few Ori that have one."""
    senses = scenario.senses
    tick = state.tick
    delta = state.ori_xy - state.player_xy
    dist = np.hypot(delta[:, 0], delta[:, 1])
    on_screen = dist <= senses.on_screen_mm
    scene = dist <= senses.scene_mm
    nearby = dist <= senses.resident_mm
    proximity = np.where(nearby, np.minimum(np.rint(dist), NO_PLAYER_MM - 1), NO_PLAYER_MM).astype("<i4")
    flags = np.zeros(population.size, dtype="<u2")

    def put(name: str, mask: npt.NDArray[np.bool_]) -> None:
        nonlocal flags
        flags |= (mask.astype(np.uint16) << PERCEPTION_FLAG_BITS[name]).astype("<u2")

    put("on_screen", on_screen)
    put("scene_copresence", scene)
    put("player_nearby_in_world", nearby)
    if (population.minor & scene).any():
        put("minor_present", scene)
    crossroads = np.zeros(population.size, dtype=np.bool_)
    for window, _ in script.crossroads:
        crossroads[window.row] |= window.holds(tick)
    put("open_crossroads", crossroads)
    imminent = np.zeros(population.size, dtype=np.bool_)
    for window, _ in script.irreversible:
        imminent[window.row] |= window.holds(tick)
    put("imminent_irreversible_action", imminent)
    addressed = np.zeros(population.size, dtype="<u4")
    for row, _ in script.addressed.get(tick, []):
        addressed[row] = script.player_id
    lod = np.full(population.size, perception_pb2.VISUAL_LOD_CULLED, dtype="u1")
    lod[nearby] = perception_pb2.VISUAL_LOD_FAR
    lod[on_screen] = perception_pb2.VISUAL_LOD_MID
    lod[dist <= NEAR_LOD_MM] = perception_pb2.VISUAL_LOD_NEAR
    needs = state.needs
    return Perception(
        tick,
        {
            "signal_flags": flags,
            "visual_lod": lod,
            "player_proximity_mm": proximity,
            "addressed_by_player_id": addressed,
            "goal_ref": np.where(np.isin(state.kind, GOAL_KINDS), state.kind, 0).astype("<u4"),
            "goal_progress_signature": state.progress.astype("<u8"),
            "need_safety_bp": needs[:, 0].astype("<u2"),
            "need_sustaining_bp": needs[:, 1].astype("<u2"),
            "need_social_bp": needs[:, 2].astype("<u2"),
            "need_purpose_bp": needs[:, 3].astype("<u2"),
            "fatigue_bp": needs[:, 4].astype("<u2"),
        },
        script.situations(tick, state.ori_xy, dist),
    )


def to_rows(perception: Perception, slots: npt.NDArray[np.uint32]) -> list[perception_pb2.PerceptionFrame]:
    """Row form, for small worlds and simple engine clients."""
    a = perception.arrays
    frames = []
    for i in range(len(slots)):
        bits = int(a["signal_flags"][i])
        frames.append(
            perception_pb2.PerceptionFrame(
                slot=int(slots[i]),
                visual_lod=int(a["visual_lod"][i]),  # type: ignore[arg-type]
                player_proximity_mm=int(a["player_proximity_mm"][i]),
                addressed_by_player_id=int(a["addressed_by_player_id"][i]),
                goal_ref=int(a["goal_ref"][i]),
                goal_progress_signature=int(a["goal_progress_signature"][i]),
                need_safety_bp=int(a["need_safety_bp"][i]),
                need_sustaining_bp=int(a["need_sustaining_bp"][i]),
                need_social_bp=int(a["need_social_bp"][i]),
                need_purpose_bp=int(a["need_purpose_bp"][i]),
                fatigue_bp=int(a["fatigue_bp"][i]),
                **{name: bool(bits >> bit & 1) for name, bit in PERCEPTION_FLAG_BITS.items()},
            )
        )
    return frames


def to_columns(
    perception: Perception, previous: Perception | None = None
) -> perception_pb2.PerceptionColumns:
    """Columnar form; with `previous`, a delta frame listing only the rows whose signals changed.

    Rows are slots (the world registers its Ori in row order and checks the kernel agreed).
    """
    a = perception.arrays
    if previous is None:
        return perception_pb2.PerceptionColumns(
            layout_version=LAYOUT_VERSION,
            count=len(a["signal_flags"]),
            **{
                name: np.ascontiguousarray(a[name], dtype=dtype).tobytes()
                for name, dtype in PERCEPTION_COLUMNS.items()
            },
        )
    changed = np.zeros(len(a["signal_flags"]), dtype=np.bool_)
    for name in PERCEPTION_COLUMNS:
        changed |= a[name] != previous.arrays[name]
    rows = np.flatnonzero(changed)
    return perception_pb2.PerceptionColumns(
        layout_version=LAYOUT_VERSION,
        count=len(rows),
        slots=rows.astype(SLOT_DTYPE).tobytes(),
        **{
            name: np.ascontiguousarray(a[name][rows], dtype=dtype).tobytes()
            for name, dtype in PERCEPTION_COLUMNS.items()
        },
    )
