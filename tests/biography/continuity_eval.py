"""The continuity eval: Ori live a game-day off-screen, escalate, and must cite what mattered.

Each case gives an Ori an on-screen past, then a de-escalated game-day whose fine-grained fragments
are consolidated every few game-hours, then rehydrates it within the load budget and makes the first
Clotho decision from that context alone. The case passes when the decision cites every expected
memory, relationship and arc ref. The set passes at CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from biography_service.consolidation import Fragment
from biography_service.events import ANY, EventKind, JsonObject, NewEvent
from biography_service.rehydration import LoadBudget, WorkingContext
from biography_service.service import Biography

CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS = 9_500
GAME_DAY_TICKS = 24 * 60  # one tick per game minute
CONSOLIDATE_EVERY_TICKS = 6 * 60  # de-escalation consolidation every six game-hours
FIXED_CASE_SEEDS = tuple(range(20))
DECISION_MEMORIES = 3
DECISION_RELATIONSHIPS = 2
SIGNIFICANT_SALIENCE_BP = 9_000


@dataclass(frozen=True)
class ContinuityCase:
    """One Ori's off-screen day and the refs its first decision must cite."""

    ori_id: str
    past: list[NewEvent]
    day: list[Fragment]
    expected_refs: frozenset[str]


@dataclass(frozen=True)
class ClothoDecision:
    """The first high-fidelity decision after escalation, and the refs it grounds itself on."""

    ori_id: str
    cited_refs: frozenset[str]


@dataclass(frozen=True)
class CaseResult:
    ori_id: str
    passed: bool
    missing_refs: frozenset[str]
    omitted: dict[str, int]


@dataclass(frozen=True)
class ContinuityReport:
    results: list[CaseResult]

    @property
    def pass_rate_basis_points(self) -> int:
        return sum(r.passed for r in self.results) * 10_000 // len(self.results)

    @property
    def passed(self) -> bool:
        return self.pass_rate_basis_points >= CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS


def build_case(seed: int) -> ContinuityCase:
    """A deterministic case from its seed: mundane noise, a few significant moments, one live arc."""
    rng = random.Random(seed)
    ori_id = f"ori-eval-{seed}"
    others = [f"ori-neighbour-{seed}-{i}" for i in range(rng.randint(3, 12))]
    history: list[tuple[EventKind, JsonObject]] = [
        (EventKind.MEMORY_FORMED, {"text": f"ordinary day {i}", "salience_bp": rng.randint(500, 7000)})
        for i in range(rng.randint(5, 40))
    ]
    history += [
        (EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": o, "bond": rng.randint(-20, 20)}) for o in others
    ]
    history.append((EventKind.ARC_ADVANCED, {"arc_ref": f"arc:{seed}:old-feud", "status": "completed"}))
    history.append((EventKind.VALUE_SHIFT, {"value_ref": "value:duty", "weight_bp": rng.randint(3000, 8000)}))
    past = [
        NewEvent(str(uuid.UUID(int=rng.getrandbits(128))), kind, payload, tick)
        for tick, (kind, payload) in enumerate(history)
    ]
    significant = [f"{ori_id}:moment:{i}" for i in range(rng.randint(1, 3))]
    confidant = rng.choice(others)
    live_arc = f"arc:{seed}:harvest-festival"
    day: list[Fragment] = []
    for i in range(rng.randint(50, 400)):
        payload = {
            "text": f"chore {i}: {rng.choice(['fed hens', 'mended net', 'swept yard'])}",
            "salience_bp": rng.randint(100, 6000),
        }
        day.append(
            Fragment(f"{ori_id}:chore:{i}", EventKind.MEMORY_FORMED, payload, rng.randrange(GAME_DAY_TICKS))
        )
    for ref in significant:
        payload = {"text": f"{ref}: something that changed the day", "salience_bp": rng.randint(9000, 10000)}
        day.append(Fragment(ref, EventKind.MEMORY_FORMED, payload, rng.randrange(GAME_DAY_TICKS)))
    day.append(
        Fragment(
            f"{ori_id}:bond",
            EventKind.RELATIONSHIP_CHANGED,
            {"other_ori_id": confidant, "bond": 80, "respect": 60, "summary": "stood by me"},
            rng.randrange(GAME_DAY_TICKS),
        )
    )
    day.append(
        Fragment(
            f"{ori_id}:arc",
            EventKind.ARC_ADVANCED,
            {"arc_ref": live_arc, "status": "active"},
            rng.randrange(GAME_DAY_TICKS),
        )
    )
    day.sort(key=lambda f: f.world_tick)
    return ContinuityCase(ori_id, past, day, frozenset([*significant, confidant, live_arc]))


def first_clotho_decision(context: WorkingContext) -> ClothoDecision:
    """Ground the first decision on the rehydrated context alone: top memories, strongest ties, live arcs."""
    cited = {m.ref for m in context.memories[:DECISION_MEMORIES]}
    cited |= {r.other_ori_id for r in context.relationships[:DECISION_RELATIONSHIPS]}
    cited |= set(context.arc_refs)
    return ClothoDecision(context.ori_id, frozenset(cited))


async def run_case(biography: Biography, case: ContinuityCase, budget: LoadBudget) -> CaseResult:
    await biography.append(case.ori_id, ANY, case.past)
    window_start = 0
    while window_start < GAME_DAY_TICKS:
        window = [
            f for f in case.day if window_start <= f.world_tick < window_start + CONSOLIDATE_EVERY_TICKS
        ]
        if window:
            await biography.consolidate(case.ori_id, window, f"{case.ori_id}:day1:{window_start}")
        window_start += CONSOLIDATE_EVERY_TICKS
    context = await biography.rehydrate(case.ori_id, budget)
    decision = first_clotho_decision(context)
    missing = case.expected_refs - decision.cited_refs
    return CaseResult(case.ori_id, not missing, frozenset(missing), context.omitted)


async def evaluate_continuity(
    biography: Biography, budget: LoadBudget, seeds: tuple[int, ...] = FIXED_CASE_SEEDS
) -> ContinuityReport:
    """Run every case of the fixed set through `biography` and score the pass rate."""
    return ContinuityReport([await run_case(biography, build_case(seed), budget) for seed in seeds])
