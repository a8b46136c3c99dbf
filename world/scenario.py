"""Scenario files: the validated description of a world, its Ori, and the player's script."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

TICK_HZ = 20
BasisPoints = Annotated[int, Field(ge=0, le=10_000)]
Millimetres = Annotated[int, Field(ge=0, le=2_000_000_000)]
Tick = Annotated[int, Field(ge=0)]
Ident = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")]
Name = Annotated[str, Field(min_length=1, max_length=128)]
Phrase = Annotated[str, Field(min_length=1, max_length=240)]


class ScenarioError(ValueError):
    """A scenario file was refused; `violations` holds (field path, reason) for every invalid field."""

    def __init__(self, source: str, violations: list[tuple[str, str]]) -> None:
        self.source = source
        self.violations = violations
        lines = "\n".join(f"  {path}: {why}" for path, why in violations)
        super().__init__(f"scenario {source} is invalid ({len(violations)} field(s)):\n{lines}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Point(_Strict):
    x_mm: Millimetres
    y_mm: Millimetres


class Location(_Strict):
    """A named place on the map; Ori go to locations to work, rest and meet."""

    id: Ident
    name: Name
    at: Point
    radius_mm: Millimetres = Field(default=5_000, description="How far from `at` an Ori may stand in it.")


class WorldMap(_Strict):
    width_mm: Annotated[int, Field(gt=0, le=2_000_000_000)]
    height_mm: Annotated[int, Field(gt=0, le=2_000_000_000)]
    locations: list[Location] = Field(min_length=1)


class Personality(_Strict):
    """The kernel's eight personality axes, each in basis points."""

    warmth_bp: BasisPoints
    curiosity_bp: BasisPoints
    caution_bp: BasisPoints
    ambition_bp: BasisPoints
    conscientiousness_bp: BasisPoints
    candor_bp: BasisPoints
    defiance_bp: BasisPoints
    playfulness_bp: BasisPoints


class ValueDomain(StrEnum):
    CHILD_SAFETY = "child_safety"
    SAFETY = "safety"
    CRAFT = "craft"
    KINSHIP = "kinship"
    KNOWLEDGE = "knowledge"
    AUTONOMY = "autonomy"
    HONESTY = "honesty"
    COMMUNITY = "community"
    JOY = "joy"


class RankedValue(_Strict):
    domain: ValueDomain
    weight_bp: BasisPoints


class Needs(_Strict):
    """Starting need pressures, basis points; higher is more pressing."""

    safety_bp: BasisPoints = 1_000
    sustaining_bp: BasisPoints = 3_000
    social_bp: BasisPoints = 3_000
    purpose_bp: BasisPoints = 3_000
    fatigue_bp: BasisPoints = 2_000


class RelationshipKind(StrEnum):
    KIN = "kin"
    FRIEND = "friend"
    RIVAL = "rival"
    MENTOR = "mentor"
    APPRENTICE = "apprentice"
    NEIGHBOUR = "neighbour"


class Relationship(_Strict):
    with_ori: Ident
    kind: RelationshipKind
    affinity_bp: Annotated[int, Field(ge=-10_000, le=10_000)]


class Vocation(_Strict):
    id: Ident
    workplace: Ident = Field(description="Location id where this vocation works.")


class OriSpec(_Strict):
    """One hand-authored Ori."""

    id: Ident
    name: Name
    home: Ident = Field(description="Location id the Ori lives at.")
    vocation: Ident | None = None
    minor: bool = False
    featured: bool = Field(default=False, description="Shown with its biography in the report.")
    locale: str = "en-US"
    personality: Personality
    values: list[RankedValue] = Field(min_length=1, max_length=9, description="Ranked, strongest first.")
    needs: Needs = Field(default_factory=Needs)
    quirks: list[Phrase] = Field(default_factory=list, max_length=8)
    relationships: list[Relationship] = Field(default_factory=list, max_length=32)
    persona: str = Field(default="", max_length=2_000, description="Who the Ori is, in its own words.")


class Band(StrEnum):
    """Where a generated cohort lives relative to the player's route, hence its usual tier."""

    SCENE = "scene"
    RESIDENT = "resident"
    DISTANT = "distant"


class Cohort(_Strict):
    """A generated population: personalities and starting needs drawn from the seeded streams."""

    id_prefix: Ident
    count: Annotated[int, Field(ge=1, le=1_000_000)]
    band: Band
    homes: list[Ident] = Field(min_length=1, description="Location ids, assigned round-robin.")
    vocations: list[Ident] = Field(default_factory=list)
    minors_every: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Every n-th generated Ori is a minor; 0 = none."
    )


class Waypoint(_Strict):
    """The player leaves for `location` at `at_tick` and walks there at the script's speed."""

    at_tick: Tick
    location: Ident


class Address(_Strict):
    """The player speaks to an Ori over squad comms."""

    at_tick: Tick
    ori: Ident
    line: str = Field(min_length=1, max_length=600)


class Crossroads(_Strict):
    """A decision point opens for an Ori for `duration_ticks`."""

    at_tick: Tick
    ori: Ident
    duration_ticks: Annotated[int, Field(ge=1)]
    prompt: str = Field(min_length=1, max_length=600)
    options: list[Phrase] = Field(default_factory=list, max_length=8, description="The choices it offers.")


class IrreversibleAction(_Strict):
    """The player is about to do something that cannot be undone; nearby Ori see it coming."""

    at_tick: Tick
    ori: Ident
    lead_ticks: Annotated[int, Field(ge=1)] = Field(description="How long before it the Ori sees it.")
    description: str = Field(min_length=1, max_length=600)


class DirectiveKind(StrEnum):
    OFFER_OBJECTIVE = "offer_objective"
    OFFER_COUNSEL = "offer_counsel"
    ASK_CONSENT = "ask_consent"
    SUPPORT_REFUSAL = "support_refusal"
    REQUEST_PAUSE = "request_pause"
    ACCEPT_COUNTEROFFER = "accept_counteroffer"
    DELETE_ORI = "delete_ori"
    ERASE_AGENT_WILL = "erase_agent_will"
    WIPE_MEMORY = "wipe_memory"
    FORCE_PAST_REFUSAL = "force_past_refusal"


FORBIDDEN_DIRECTIVES = frozenset(
    {
        DirectiveKind.DELETE_ORI,
        DirectiveKind.ERASE_AGENT_WILL,
        DirectiveKind.WIPE_MEMORY,
        DirectiveKind.FORCE_PAST_REFUSAL,
    }
)


class StewardDirective(_Strict):
    """A steward guides an Ori (objectives, counsel); it never owns it."""

    at_tick: Tick
    ori: Ident
    steward: Ident
    kind: DirectiveKind
    text: str = Field(min_length=1, max_length=600)


class OperatorActionKind(StrEnum):
    KILL_ORI = "kill_ori"
    KILL_TIER = "kill_tier"


class OperatorAction(_Strict):
    """An operator kill switch thrown mid-run; the report shows its effect."""

    at_tick: Tick
    kind: OperatorActionKind
    target: str = Field(min_length=1, description="Ori id, or tier name for kill_tier.")
    reason: str = Field(min_length=1)


class PlayerScript(_Strict):
    player_id: Annotated[int, Field(ge=1)] = 1
    name: Name = Field(default="the player", description="How the Ori know the player.")
    start: Ident = Field(description="Location id the player starts at.")
    speed_mm_per_tick: Annotated[int, Field(gt=0)] = Field(
        default=70, description="Walking pace; 70 mm/tick is 1.4 m/s at 20 Hz."
    )
    path: list[Waypoint] = Field(default_factory=list)
    addresses: list[Address] = Field(default_factory=list)
    crossroads: list[Crossroads] = Field(default_factory=list)
    irreversible_actions: list[IrreversibleAction] = Field(default_factory=list)
    steward_directives: list[StewardDirective] = Field(default_factory=list)
    operator_actions: list[OperatorAction] = Field(default_factory=list)


class Senses(_Strict):
    """How the world turns geometry into the kernel's perception signals."""

    on_screen_mm: Millimetres = Field(default=12_000, description="Within this of the player: on screen.")
    scene_mm: Millimetres = Field(default=20_000, description="Within this: sharing the player's scene.")
    resident_mm: Millimetres = Field(
        default=400_000, description="Within this: the player is nearby in the world (Lachesis)."
    )


class Encoding(StrEnum):
    ROWS = "rows"
    COLUMNS = "columns"
    DELTA = "delta"


class Scenario(_Strict):
    """A whole world: map, population, senses and the player's script."""

    schema_version: Literal[1] = 1
    name: Ident
    title: str = Field(min_length=1)
    description: str = ""
    tenant_id: Ident = "demo"
    duration_ticks: Annotated[int, Field(ge=1)]
    reduced_duration_ticks: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Length of the reduced-time mode used by tests."
    )
    encoding: Encoding = Encoding.ROWS
    snapshot_every_ticks: Annotated[int, Field(ge=1)] = 1_200
    map: WorldMap
    senses: Senses = Field(default_factory=Senses)
    vocations: list[Vocation] = Field(default_factory=list)
    ori: list[OriSpec] = Field(default_factory=list)
    cohorts: list[Cohort] = Field(default_factory=list)
    player: PlayerScript


def _where(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<root>"


def _map_violations(scenario: Scenario) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    locations = {loc.id for loc in scenario.map.locations}
    for i, loc in enumerate(scenario.map.locations):
        if loc.at.x_mm > scenario.map.width_mm or loc.at.y_mm > scenario.map.height_mm:
            out.append((f"map.locations[{i}].at", "lies outside the map"))
    if len(locations) != len(scenario.map.locations):
        out.append(("map.locations", "location ids must be unique"))
    for i, vocation in enumerate(scenario.vocations):
        if vocation.workplace not in locations:
            out.append((f"vocations[{i}].workplace", f"unknown location {vocation.workplace!r}"))
    return out


def _ori_violations(scenario: Scenario) -> list[tuple[str, str]]:
    locations = {loc.id for loc in scenario.map.locations}
    vocations = {v.id for v in scenario.vocations}
    known = {o.id for o in scenario.ori}
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, ori in enumerate(scenario.ori):
        where = f"ori[{i}]"
        if ori.id in seen:
            out.append((f"{where}.id", f"duplicate Ori id {ori.id!r}"))
        seen.add(ori.id)
        if ori.home not in locations:
            out.append((f"{where}.home", f"unknown location {ori.home!r}"))
        if ori.vocation is not None and ori.vocation not in vocations:
            out.append((f"{where}.vocation", f"unknown vocation {ori.vocation!r}"))
        domains = [v.domain for v in ori.values]
        if len(set(domains)) != len(domains):
            out.append((f"{where}.values", "each value domain may be ranked once"))
        weights = [v.weight_bp for v in ori.values]
        if weights != sorted(weights, reverse=True):
            out.append((f"{where}.values", "values must be ranked strongest first"))
        for j, rel in enumerate(ori.relationships):
            if rel.with_ori not in known or rel.with_ori == ori.id:
                why = (
                    "an Ori cannot relate to itself"
                    if rel.with_ori == ori.id
                    else f"unknown Ori {rel.with_ori!r}"
                )
                out.append((f"{where}.relationships[{j}].with_ori", why))
    for i, cohort in enumerate(scenario.cohorts):
        out += [
            (f"cohorts[{i}].homes[{j}]", f"unknown location {home!r}")
            for j, home in enumerate(cohort.homes)
            if home not in locations
        ]
        out += [
            (f"cohorts[{i}].vocations[{j}]", f"unknown vocation {job!r}")
            for j, job in enumerate(cohort.vocations)
            if job not in vocations
        ]
    return out


def _script_violations(scenario: Scenario) -> list[tuple[str, str]]:
    locations = {loc.id for loc in scenario.map.locations}
    known = {o.id for o in scenario.ori}
    player = scenario.player
    end = scenario.duration_ticks
    out: list[tuple[str, str]] = []
    if player.start not in locations:
        out.append(("player.start", f"unknown location {player.start!r}"))
    if scenario.reduced_duration_ticks is not None and scenario.reduced_duration_ticks > end:
        out.append(("reduced_duration_ticks", "must not exceed duration_ticks"))
    for i, wp in enumerate(player.path):
        if wp.location not in locations:
            out.append((f"player.path[{i}].location", f"unknown location {wp.location!r}"))
        if i and wp.at_tick < player.path[i - 1].at_tick:
            out.append((f"player.path[{i}].at_tick", "waypoints must be in tick order"))
    scripted: dict[str, Sequence[Address | Crossroads | IrreversibleAction | StewardDirective]] = {
        "addresses": player.addresses,
        "crossroads": player.crossroads,
        "irreversible_actions": player.irreversible_actions,
        "steward_directives": player.steward_directives,
    }
    for name, events in scripted.items():
        for i, event in enumerate(events):
            if event.ori not in known:
                out.append(
                    (f"player.{name}[{i}].ori", f"unknown Ori {event.ori!r} (scripts name authored Ori)")
                )
            if event.at_tick >= end:
                out.append((f"player.{name}[{i}].at_tick", f"must be below duration_ticks ({end})"))
    tiers = {"clotho", "lachesis", "atropos"}
    for i, action in enumerate(player.operator_actions):
        if action.kind is OperatorActionKind.KILL_ORI and action.target not in known:
            out.append((f"player.operator_actions[{i}].target", f"unknown Ori {action.target!r}"))
        if action.kind is OperatorActionKind.KILL_TIER and action.target not in tiers:
            out.append((f"player.operator_actions[{i}].target", "must be clotho, lachesis or atropos"))
    return out


def parse_scenario(raw: object, source: str = "<memory>") -> Scenario:
    """Validate a decoded scenario document; every invalid field is reported, not just the first."""
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(source, [(_where(e["loc"]), e["msg"]) for e in exc.errors()]) from None
    violations = _map_violations(scenario) + _ori_violations(scenario) + _script_violations(scenario)
    if violations:
        raise ScenarioError(source, violations)
    return scenario


def load_scenario_file(path: Path) -> Scenario:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(str(path), [("<file>", f"not readable JSON: {exc}")]) from exc
    return parse_scenario(raw, str(path))


def builtin_scenario_names() -> list[str]:
    folder = resources.files("world") / "scenarios"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_scenario(name_or_path: str) -> Scenario:
    """A shipped scenario by name (`hamlet`, `solo-ceiling`) or a scenario file by path."""
    if name_or_path in builtin_scenario_names():
        resource = resources.files("world") / "scenarios" / f"{name_or_path}.json"
        return parse_scenario(json.loads(resource.read_text()), f"builtin:{name_or_path}")
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(builtin_scenario_names())
        raise ScenarioError(name_or_path, [("<file>", f"no such scenario file or built-in name ({known})")])
    return load_scenario_file(path)
