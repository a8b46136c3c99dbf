"""The player's script keyed by tick and Ori row, and the situation text it gives a tick.

The kernel's signals (addressed, open crossroads, imminent irreversible action) are flags; what was
said, the crossroads' prompt and options, the action's description, where an Ori stands and who is
near it travel beside them as SituationText, for the few Ori that have any (never the whole world).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from egbe.v1 import perception_pb2
from world.population import Population
from world.scenario import Scenario

NEARBY_MAX = 16  # SituationText.nearby holds at most 16 names


@dataclass(frozen=True)
class Window:
    """The ticks a scripted moment is open for one Ori row, both ends included."""

    row: int
    first: int
    last: int

    def holds(self, tick: int) -> bool:
        return self.first <= tick <= self.last


class _Places:
    """The map's locations as arrays, to name the place an Ori stands in."""

    def __init__(self, scenario: Scenario) -> None:
        locations = scenario.map.locations
        self.names = [loc.name for loc in locations]
        self.xy = np.array([(loc.at.x_mm, loc.at.y_mm) for loc in locations], dtype=np.float64)
        self.radius = np.array([loc.radius_mm for loc in locations], dtype=np.float64)

    def of(self, xy: npt.NDArray[np.int64]) -> list[str]:
        """For each point, the name of the nearest location it lies inside, or "" outside every one."""
        d = np.hypot(*(xy[:, None, :] - self.xy[None, :, :]).transpose(2, 0, 1))
        inside = d <= self.radius
        nearest = np.where(inside, d, np.inf).argmin(axis=1)
        return [self.names[j] if inside[i, j] else "" for i, j in enumerate(nearest)]


@dataclass
class ScriptIndex:
    """The player script keyed by tick and Ori row, so building a tick's signals is a lookup."""

    places: _Places
    names: list[str]  # by row
    scene_mm: float
    player_id: int = 1
    player_name: str = "the player"
    addressed: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # tick -> (row, line)
    crossroads: list[tuple[Window, perception_pb2.CrossroadsText]] = field(default_factory=list)
    irreversible: list[tuple[Window, str]] = field(default_factory=list)

    @property
    def speaker_id(self) -> str:
        return f"player-{self.player_id}"

    @classmethod
    def build(cls, scenario: Scenario, population: Population) -> ScriptIndex:
        script = scenario.player
        index = cls(
            places=_Places(scenario),
            names=[row.name for row in population.rows],
            scene_mm=float(scenario.senses.scene_mm),
            player_id=script.player_id,
            player_name=script.name,
        )
        for address in script.addresses:
            row = population.index_of(address.ori)
            index.addressed.setdefault(address.at_tick, []).append((row, address.line))
        for c in script.crossroads:
            window = Window(population.index_of(c.ori), c.at_tick, c.at_tick + c.duration_ticks - 1)
            text = perception_pb2.CrossroadsText(
                crossroads_id=crossroads_id(c.ori, c.at_tick), prompt=c.prompt, options=c.options
            )
            index.crossroads.append((window, text))
        for a in script.irreversible_actions:
            window = Window(population.index_of(a.ori), a.at_tick - a.lead_ticks, a.at_tick)
            index.irreversible.append((window, a.description))
        return index

    def situations(
        self, tick: int, ori_xy: npt.NDArray[np.int64], player_mm: npt.NDArray[np.float64]
    ) -> list[perception_pb2.SituationText]:
        """`player_mm` is each Ori's distance to the player this tick (perception computes it)."""
        texts: dict[int, perception_pb2.SituationText] = {}

        def entry(row: int) -> perception_pb2.SituationText:
            return texts.setdefault(row, perception_pb2.SituationText(slot=row))

        for row, line in self.addressed.get(tick, ()):
            entry(row).player_line.CopyFrom(
                perception_pb2.SpokenLine(
                    speaker_id=self.speaker_id, speaker_name=self.player_name, text=line
                )
            )
        for window, crossroads in self.crossroads:
            if window.holds(tick):
                entry(window.row).crossroads.CopyFrom(crossroads)
        for window, description in self.irreversible:
            if window.holds(tick):
                entry(window.row).irreversible_action = description
        in_scene = player_mm <= self.scene_mm
        rows = np.union1d(np.flatnonzero(in_scene), np.fromiter(texts, dtype=np.int64, count=len(texts)))
        if rows.size == 0:
            return []
        # An Ori in the player's scene has its neighbours within twice the scene distance of the player.
        pool = np.flatnonzero(player_mm <= 2 * self.scene_mm)
        everyone = np.arange(len(player_mm))
        for row, place in zip(rows.tolist(), self.places.of(ori_xy[rows]), strict=True):
            candidates = pool if in_scene[row] else everyone
            d = np.hypot(*(ori_xy[candidates] - ori_xy[row]).T)
            close = np.flatnonzero((d <= self.scene_mm) & (candidates != row))
            close = close[np.argsort(d[close], kind="stable")][:NEARBY_MAX]
            if row not in texts and not place and not close.size:
                continue
            situation = entry(row)
            situation.place = place
            situation.nearby.extend(self.names[int(candidates[j])] for j in close)
        return [texts[row] for row in sorted(texts)]


def crossroads_id(ori_id: str, at_tick: int) -> str:
    return f"crossroads-{ori_id}-{at_tick}"
