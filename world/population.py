"""Expands a scenario into its population: authored Ori plus seeded cohorts, as arrays in slot order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from world.rng import ori_key, stream
from world.scenario import (
    Band,
    Location,
    Needs,
    Personality,
    RankedValue,
    Relationship,
    Scenario,
    ValueDomain,
)

PERSONALITY_AXES = tuple(Personality.model_fields)
NEED_AXES = tuple(Needs.model_fields)
# Given names for generated Ori; the id follows, so two Ori never share a name.
GIVEN_NAMES = (
    "Abeni",
    "Bayo",
    "Chika",
    "Dayo",
    "Ebele",
    "Femi",
    "Gbenga",
    "Hauwa",
    "Ifeoma",
    "Jide",
    "Kemi",
    "Lami",
    "Musa",
    "Nneka",
    "Obi",
    "Remi",
    "Sade",
    "Tunde",
    "Uche",
    "Zainab",
)


@dataclass(frozen=True)
class OriRow:
    """One Ori as the scenario describes it, authored or drawn."""

    id: str
    name: str
    authored: bool
    band: Band
    featured: bool
    minor: bool
    locale: str
    vocation: str
    quirks: list[str]
    values: list[RankedValue]
    personality: list[int]
    needs: list[int]
    home: tuple[int, int]
    work: tuple[int, int]
    home_name: str
    relationships: list[Relationship]
    persona: str


@dataclass(frozen=True)
class Population:
    """Row i describes the i-th Ori registered with the kernel."""

    rows: list[OriRow]
    personality: npt.NDArray[np.uint16]  # (N, 8) basis points
    needs: npt.NDArray[np.int32]  # (N, 5) basis points at the start
    home_xy: npt.NDArray[np.int64]  # (N, 2) millimetres
    work_xy: npt.NDArray[np.int64]  # (N, 2)
    partner: npt.NDArray[np.int64]  # (N,) row of the Ori it seeks out to socialise, or -1
    minor: npt.NDArray[np.bool_]
    featured: npt.NDArray[np.bool_]
    keys: npt.NDArray[np.uint64]  # (N,) RNG keys of the ids
    ids: list[str]

    @property
    def size(self) -> int:
        return len(self.ids)

    def index_of(self, ori_id: str) -> int:
        return self.ids.index(ori_id)


def _spot(location: Location, seed: int, ori_id: str, purpose: str) -> tuple[int, int]:
    """A point inside a location, drawn from the Ori's own stream."""
    rng = stream(seed, 0, ori_id, purpose)
    angle = rng.uniform(0.0, 2.0 * np.pi)
    radius = location.radius_mm * np.sqrt(rng.uniform(0.0, 1.0))
    return int(location.at.x_mm + radius * np.cos(angle)), int(location.at.y_mm + radius * np.sin(angle))


def _drawn_values(seed: int, ori_id: str) -> list[RankedValue]:
    rng = stream(seed, 0, ori_id, "values")
    domains = list(ValueDomain)
    chosen = rng.permutation(len(domains))[:4]
    weights = sorted((int(w) for w in rng.integers(2_000, 10_001, size=4)), reverse=True)
    return [RankedValue(domain=domains[c], weight_bp=w) for c, w in zip(chosen, weights, strict=True)]


def _authored(scenario: Scenario, seed: int) -> Iterator[OriRow]:
    where = {loc.id: loc for loc in scenario.map.locations}
    workplaces = {v.id: where[v.workplace] for v in scenario.vocations}
    for spec in scenario.ori:
        yield OriRow(
            id=spec.id,
            name=spec.name,
            authored=True,
            band=Band.SCENE,
            featured=spec.featured,
            minor=spec.minor,
            locale=spec.locale,
            vocation=spec.vocation or "",
            quirks=list(spec.quirks),
            values=list(spec.values),
            personality=[getattr(spec.personality, a) for a in PERSONALITY_AXES],
            needs=[getattr(spec.needs, a) for a in NEED_AXES],
            home=_spot(where[spec.home], seed, spec.id, "home"),
            work=_spot(workplaces.get(spec.vocation or "", where[spec.home]), seed, spec.id, "work"),
            home_name=where[spec.home].name,
            relationships=list(spec.relationships),
            persona=spec.persona,
        )


def _generated(scenario: Scenario, seed: int) -> Iterator[OriRow]:
    where = {loc.id: loc for loc in scenario.map.locations}
    workplaces = {v.id: where[v.workplace] for v in scenario.vocations}
    for cohort in scenario.cohorts:
        for n in range(cohort.count):
            ori_id = f"{cohort.id_prefix}-{n:05d}"
            rng = stream(seed, 0, ori_id, "traits")
            home = where[cohort.homes[n % len(cohort.homes)]]
            job = cohort.vocations[n % len(cohort.vocations)] if cohort.vocations else ""
            personality = [int(v) for v in rng.integers(1_000, 9_001, size=len(PERSONALITY_AXES))]
            needs = [int(v) for v in rng.integers(500, 5_001, size=len(NEED_AXES))]
            given = GIVEN_NAMES[int(rng.integers(len(GIVEN_NAMES)))]
            yield OriRow(
                id=ori_id,
                name=f"{given} ({ori_id})",
                authored=False,
                band=cohort.band,
                featured=False,
                minor=cohort.minors_every > 0 and n % cohort.minors_every == cohort.minors_every - 1,
                locale="en-US",
                vocation=job,
                quirks=[],
                values=_drawn_values(seed, ori_id),
                personality=personality,
                needs=needs,
                home=_spot(home, seed, ori_id, "home"),
                work=_spot(workplaces.get(job, home), seed, ori_id, "work"),
                home_name=home.name,
                relationships=[],
                persona="",
            )


def build_population(scenario: Scenario, seed: int) -> Population:
    """Authored Ori first, in file order, then each cohort; everything drawn is keyed by the Ori id."""
    rows = [*_authored(scenario, seed), *_generated(scenario, seed)]
    ids = [r.id for r in rows]
    row_of = {ori_id: i for i, ori_id in enumerate(ids)}
    partner = np.full(len(rows), -1, dtype=np.int64)
    for i, spec in enumerate(scenario.ori):
        friendly = [r for r in spec.relationships if r.affinity_bp > 0]
        if friendly:
            partner[i] = row_of[max(friendly, key=lambda r: r.affinity_bp).with_ori]
    n = len(rows)
    return Population(
        rows=rows,
        personality=np.array([r.personality for r in rows], dtype=np.uint16).reshape(
            n, len(PERSONALITY_AXES)
        ),
        needs=np.array([r.needs for r in rows], dtype=np.int32).reshape(n, len(NEED_AXES)),
        home_xy=np.array([r.home for r in rows], dtype=np.int64).reshape(n, 2),
        work_xy=np.array([r.work for r in rows], dtype=np.int64).reshape(n, 2),
        partner=partner,
        minor=np.array([r.minor for r in rows], dtype=np.bool_),
        featured=np.array([r.featured for r in rows], dtype=np.bool_),
        keys=np.array([ori_key(i) for i in ids], dtype=np.uint64),
        ids=ids,
    )
