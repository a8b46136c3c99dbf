"""`PersonalityBehaviorLayer`: the kernel's BehaviorLayer over struct-of-arrays state.

Per agent it caches the last perception inputs and what they produced (tree decision, emotion,
effective goal, compiled plan and cursor). `decide` re-evaluates trees, emotion and goal selection
only for rows whose inputs changed (or whose mood is still settling, or that cognition handed a
goal); every other row just steps its cached plan, which is what lets the kernel step 10,000
Lachesis agents inside a tick. `step` is the kernel's one call a tick (due check with the cognition
hold, `decide`, fresh-decision mark, `arbitrate`); on the C core it runs as one cffi call
(`c_step.py`, `_core/moirai_behavior.c`), byte-identical to this numpy form.
Deterministic: no clock, no RNG; `snapshot`/`restore` carry every per-agent array.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2, kernel_pb2
from kernel_service.agent_state import AGENT_BIT_FRESH_DECISION, SIGNALS_MOVED_BEHAVIOR
from kernel_service.behavior.arbitration import Arbitration, arbitrate_rows
from kernel_service.behavior.compiled_plans import NO_METHOD, CompiledMethods
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.emotion import (
    EMOTION_STYLES,
    EmotionalEpisode,
    Mood,
    MoodRows,
    evaluate_emotions,
)
from kernel_service.behavior.goal_refs import goal_families, goal_tag_masks
from kernel_service.behavior.htn import DEFAULT_METHODS_PATH, MethodLibrary, load_method_library
from kernel_service.behavior.needs import NeedGoals, most_pressing_needs, surface_goals
from kernel_service.behavior.profile import profile_from_registration, registration_violations
from kernel_service.behavior.state_checks import state_violations
from kernel_service.behavior.tree_kernel import TreeRows, evaluate_trees
from kernel_service.behavior.vocabulary import (
    MINOR_PRESENT_FLAG,
    THREAT_FLAG,
    TRAIT_FIELDS,
    VALUE_COLUMNS,
    Emotion,
    GoalFamily,
    Routine,
)
from kernel_service.behavior_seam import (
    DECISION_FIELDS,
    BehaviorDecisions,
    BehaviorSignals,
    Escalations,
    KernelArrays,
    decisions_of,
    signals_of,
)
from services.errors import FieldViolation, InvalidArgument
from services.fingerprint import fingerprint

if TYPE_CHECKING:
    from kernel_service.behavior.c_step import CBehaviorStep
    from kernel_service.slot_ranges import SlotRanges

BP = 10_000
QUIRK_SEPARATOR = "\x1f"
Index = slice | NDArray[np.intp]
# A rising edge of these perception flags is novelty: the Ori meets something its tree was not
# evaluated for, so arbitration escalates it to cognition (once per cooldown).
NOVELTY_FLAGS = THREAT_FLAG | MINOR_PRESENT_FLAG

# name -> (dtype, leading shape) of every per-agent array, shaped (*leading, capacity): a profile's
# trait axis or value domain is one contiguous row, so gathered columns stay contiguous too.
_ARRAYS: dict[str, tuple[type[np.generic], tuple[int, ...]]] = {
    "registered": (np.bool_, ()),
    "traits": (np.uint16, (len(TRAIT_FIELDS),)),  # (8, capacity)
    "values": (np.uint16, (VALUE_COLUMNS,)),  # (10, capacity), row = ValueDomain number
    "vocation_ref": (np.uint32, ()),
    "minor": (np.bool_, ()),
    "evaluated": (np.bool_, ()),
    "seen_safety": (np.uint16, ()),
    "seen_sustaining": (np.uint16, ()),
    "seen_social": (np.uint16, ()),
    "seen_purpose": (np.uint16, ()),
    "seen_fatigue": (np.uint16, ()),
    "seen_flags": (np.uint16, ()),
    "seen_goal": (np.uint32, ()),
    "tree_routine": (np.uint8, ()),
    "tree_kind": (np.uint8, ()),
    "tree_priority": (np.uint16, ()),
    "tree_value": (np.uint8, ()),
    "emotion": (np.uint8, ()),
    "hard_objective_bp": (np.int32, ()),
    "mood_valence": (np.int32, ()),
    "mood_arousal": (np.int32, ()),
    "grief": (np.int32, ()),
    "mood_active": (np.bool_, ()),
    "goal": (np.uint32, ()),
    "plan_tags": (np.uint32, ()),
    "plan_method": (np.int16, ()),
    "plan_cursor": (np.int32, ()),
    "plan_priority": (np.uint16, ()),
    # Arbitration: a situation the Ori had not seen appeared since its last arbitration, and the
    # earliest tick it may escalate to cognition again.
    "novel": (np.bool_, ()),
    "escalate_after": (np.uint64, ()),
    # Cognition decides, behaviour acts: the goal of the Ori's last merged cognition result (its
    # structured goal unless perception gives one), whether it arrived since the last evaluation, and
    # the tick until which that result's action holds (a Lachesis Ori is not stepped before it).
    "cognition_goal": (np.uint32, ()),
    "goal_adopted": (np.bool_, ()),
    "hold_until": (np.uint64, ()),
}


@dataclass(frozen=True)
class DecisionReport:
    """Why an Ori's last cheap action was what it was: legible, for logs and tests."""

    routine: Routine
    honoured_value: int
    quirks: tuple[str, ...]
    emotion: Emotion
    dialogue_style: str
    animation_tag: str
    goal_ref: int
    method_id: str | None
    plan_cursor: int


def _index(slots: NDArray[np.uint32]) -> Index:
    """A slice when the slots are evenly spaced and ascending (views, no gathers), else the intp
    index. The kernel steps every `lachesis_step_every_ticks`-th slot, so its usual set is a
    strided run, and a contiguous one is stride 1."""
    n = len(slots)
    first, last = int(slots[0]), int(slots[-1])
    if n == 1:
        return slice(first, first + 1)
    step, rest = divmod(last - first, n - 1)
    if rest == 0 and step > 0 and bool(np.all(np.diff(slots) == step)):
        return slice(first, last + 1, step)
    return slots.astype(np.intp)


class PersonalityBehaviorLayer:
    """Implements kernel_service.behavior_seam.BehaviorLayer."""

    def __init__(
        self, config: BehaviorConfig | None = None, library: MethodLibrary | None = None, capacity: int = 1024
    ) -> None:
        self.config = config or BehaviorConfig()
        self.library = library or load_method_library(DEFAULT_METHODS_PATH)
        self.methods = CompiledMethods.compile(self.library)
        self.need_goals = NeedGoals.for_library(self.library)
        self._rest_bit = self.library.tag_bit("need-rest")
        self._threat_bit = self.library.tag_bit("threat-present")
        self._minor_bit = self.library.tag_bit("minor-present")
        self._arrays: dict[str, NDArray[np.generic]] = {}
        self._quirks: list[tuple[str, ...]] = []
        self.generation = 0  # bumps whenever the arrays are replaced, so the C step re-binds them
        self._c_step: CBehaviorStep | None = None
        self._allocate(max(capacity, 1))

    # --- state ---------------------------------------------------------------------------------

    def _allocate(self, capacity: int) -> None:
        fresh = {name: np.zeros((*shape, capacity), dtype=dtype) for name, (dtype, shape) in _ARRAYS.items()}
        fresh["plan_method"][:] = NO_METHOD
        for name, old in self._arrays.items():
            fresh[name][..., : old.shape[-1]] = old
        self._arrays = fresh
        self._quirks.extend([()] * (capacity - len(self._quirks)))
        for name, array in fresh.items():
            setattr(self, name, array)
        self.generation += 1

    @property
    def capacity(self) -> int:
        return len(self._quirks)

    # Typed views of the arrays (set by _allocate), for mypy and readers.
    registered: NDArray[np.bool_]
    traits: NDArray[np.uint16]
    values: NDArray[np.uint16]
    vocation_ref: NDArray[np.uint32]
    minor: NDArray[np.bool_]
    evaluated: NDArray[np.bool_]
    seen_safety: NDArray[np.uint16]
    seen_sustaining: NDArray[np.uint16]
    seen_social: NDArray[np.uint16]
    seen_purpose: NDArray[np.uint16]
    seen_fatigue: NDArray[np.uint16]
    seen_flags: NDArray[np.uint16]
    seen_goal: NDArray[np.uint32]
    tree_routine: NDArray[np.uint8]
    tree_kind: NDArray[np.uint8]
    tree_priority: NDArray[np.uint16]
    tree_value: NDArray[np.uint8]
    emotion: NDArray[np.uint8]
    hard_objective_bp: NDArray[np.int32]
    mood_valence: NDArray[np.int32]
    mood_arousal: NDArray[np.int32]
    grief: NDArray[np.int32]
    mood_active: NDArray[np.bool_]
    goal: NDArray[np.uint32]
    plan_tags: NDArray[np.uint32]
    plan_method: NDArray[np.int16]
    plan_cursor: NDArray[np.int32]
    plan_priority: NDArray[np.uint16]
    novel: NDArray[np.bool_]
    escalate_after: NDArray[np.uint64]
    cognition_goal: NDArray[np.uint32]
    goal_adopted: NDArray[np.bool_]
    hold_until: NDArray[np.uint64]

    # --- BehaviorLayer -------------------------------------------------------------------------

    def register(self, first_slot: int, registrations: Sequence[kernel_pb2.AgentRegistration]) -> None:
        """Validate the whole batch first, so a bad registration applies nothing."""
        violations = registration_violations(registrations)
        if first_slot < 0:
            violations.insert(0, FieldViolation("first_slot", "must be >= 0"))
        if violations:
            raise InvalidArgument(violations)
        end = first_slot + len(registrations)
        if end > self.capacity:
            self._allocate(max(end, 2 * self.capacity))
        for offset, registration in enumerate(registrations):
            slot = first_slot + offset
            profile = profile_from_registration(registration)
            for array in self._arrays.values():
                array[..., slot] = 0
            self.plan_method[slot] = NO_METHOD
            self.registered[slot] = True
            self.traits[:, slot] = profile.traits
            for domain, weight in profile.values.items():
                self.values[domain, slot] = weight
            self.vocation_ref[slot] = profile.vocation_ref
            # Stagger first escalations over one cooldown, so a population registered together
            # does not call cognition on the same tick.
            self.escalate_after[slot] = slot % self.config.escalation_cooldown_ticks
            self.minor[slot] = profile.minor
            self._quirks[slot] = profile.quirks

    def use_core(self, name: str, ranges: SlotRanges | None = None) -> None:
        """The kernel's tick core names how `step` runs: "c" in the C core (`c_step`, over the core's
        slot ranges: kernel.tick_threads), else numpy."""
        if name == "c":
            from kernel_service.behavior.c_step import CBehaviorStep  # only where the C core was built

            self._c_step = CBehaviorStep(self, ranges)
        else:
            self._c_step = None

    def adopt(self, slot: int, goal_ref: int, hold_until: int) -> None:
        """A cognition result was merged as the slot's cached action: a Lachesis Ori holds it until tick
        `hold_until`, then steps again with the result's goal as its structured goal (unless perception
        names one), which its HTN decomposes. A goal of 0 leaves the goal to perception and needs."""
        self.cognition_goal[slot] = goal_ref
        self.goal_adopted[slot] = True
        self.hold_until[slot] = hold_until

    def step(
        self,
        tick: int,
        every: int,
        kernel: KernelArrays,
        cognition_available: bool,
        slots: NDArray[np.uint32] | None = None,
    ) -> Escalations:
        """The kernel's behaviour step over its arrays, in place (C or numpy, as `use_core` chose).

        Looked at: the slots whose turn it is, `(tick + slot) % every == 0` (or `slots`, ascending).
        Due among them: an agent holding no cognition-made action, or a Lachesis agent whose hold on one
        has run out. Each due agent's cached action becomes its next cheap action (`decide`), flagged
        AGENT_BIT_FRESH_DECISION only when it differs from what was held (a routine held steady is the
        believability floor, not a new decision; the C core skips re-reading unflagged actions). Then
        `arbitrate` over them, Lachesis agents eligible: the escalations are returned (ascending; the C
        step returns views of its buffers, valid until the next step)."""
        if self._c_step is not None:
            return self._c_step.run(tick, every, kernel, cognition_available, slots)
        f = kernel.fields
        # The strided set is read through views (every `every`-th slot from `first`), no gathers.
        first = -tick % every
        look: Index = slice(first, kernel.count, every) if slots is None else slots.astype(np.intp)
        lachesis = f["tier"][look] == common_pb2.COGNITION_TIER_LACHESIS
        due = (f["cached_source"][look] != action_pb2.ACTION_SOURCE_COGNITION) | (
            lachesis & (self.hold_until[look] <= tick)
        )
        chosen = (np.flatnonzero(due) * every + first).astype(np.uint32) if slots is None else slots[due]
        if len(chosen) == 0:
            return Escalations(chosen, np.zeros(0, dtype=np.uint8))
        f["signals_moved"][chosen] &= np.uint8(~SIGNALS_MOVED_BEHAVIOR & 0xFF)  # stepped: inputs seen
        fresh = self._decide(chosen, signals_of(f), decisions_of(f))
        f["agent_bits"][chosen[fresh]] |= AGENT_BIT_FRESH_DECISION
        return self.arbitrate(
            chosen, f["tier"][chosen] == common_pb2.COGNITION_TIER_LACHESIS, tick, cognition_available
        )

    def decide(self, slots: NDArray[np.uint32], signals: BehaviorSignals, out: BehaviorDecisions) -> None:
        """Deterministically fill `out[slots]` with each agent's next cheap action (no clock, no RNG):
        rows whose inputs changed are evaluated first, then every row steps its cached plan."""
        if len(slots):
            self._decide(slots, signals, out)

    def _decide(
        self, slots: NDArray[np.uint32], signals: BehaviorSignals, out: BehaviorDecisions
    ) -> NDArray[np.bool_]:
        """`decide`; returns which rows' action differs from what `out` held (a fresh decision)."""
        idx = _index(slots)
        safety = signals.need_safety_bp[idx]
        sustaining = signals.need_sustaining_bp[idx]
        social = signals.need_social_bp[idx]
        purpose = signals.need_purpose_bp[idx]
        fatigue = signals.fatigue_bp[idx]
        flags = signals.signal_flags[idx]
        goal_in = signals.goal_ref[idx]
        changed = ~self.evaluated[idx] | self.mood_active[idx] | self.goal_adopted[idx]
        changed |= safety != self.seen_safety[idx]
        changed |= sustaining != self.seen_sustaining[idx]
        changed |= social != self.seen_social[idx]
        changed |= purpose != self.seen_purpose[idx]
        changed |= fatigue != self.seen_fatigue[idx]
        changed |= flags != self.seen_flags[idx]
        changed |= goal_in != self.seen_goal[idx]
        if changed.any():
            rows = np.asarray(slots, dtype=np.intp)[changed]
            needs = np.stack([safety, sustaining, social, purpose], axis=1)[changed]
            self._evaluate(rows, needs, fatigue[changed], flags[changed], goal_in[changed])

        method = self.plan_method[idx]
        use_plan = (method != NO_METHOD) & (self.tree_routine[idx] != Routine.MAINTAIN_SAFETY)
        known = np.maximum(method, 0)
        cursor = self.plan_cursor[idx]
        step_kind = self.methods.step_kind[self.methods.offset[known] + cursor]
        action = (
            np.where(use_plan, step_kind, self.tree_kind[idx]),
            np.where(use_plan, action_pb2.ACTION_SOURCE_HTN, action_pb2.ACTION_SOURCE_BEHAVIOR_TREE),
            self.goal[idx],
            np.where(use_plan, cursor, 0),
            np.where(use_plan, self.plan_priority[idx], self.tree_priority[idx]),
        )
        fresh = np.zeros(len(slots), dtype=bool)
        for name, computed in zip(DECISION_FIELDS, action, strict=True):
            column = getattr(out, name)
            values = computed.astype(column.dtype, copy=False)  # as stored (the C step compares so too)
            fresh |= column[idx] != values
            column[idx] = values
        # A finished plan starts over: the goal stands until the world or the needs change it.
        advanced = cursor + 1
        self.plan_cursor[idx] = np.where(
            use_plan, np.where(advanced >= self.methods.length[known], 0, advanced), cursor
        )
        return fresh

    def arbitrate(
        self, slots: NDArray[np.uint32], eligible: NDArray[np.bool_], tick: int, cognition_available: bool
    ) -> Escalations:
        """Novelty or no structured goal, or a goal no method decomposes, escalates an `eligible` row
        when cognition is available and the Ori's cooldown has passed; otherwise it keeps the
        tree/plan `decide` gave it. Novelty is consumed for every row either way: a moment that
        passed while cognition was down (or while the Ori was in a tier that does not escalate) is
        history, not a reason to call later."""
        if len(slots) == 0:
            return Escalations(slots, np.zeros(0, dtype=np.uint8))
        idx = _index(slots)
        novelty = self.novel[idx].copy()  # a slice index gives a view, and it is cleared below
        has_goal = self.goal[idx] != 0
        verdict = arbitrate_rows(
            np.full(len(slots), cognition_available),
            novelty,
            has_goal,
            self.plan_method[idx] != NO_METHOD,
        )
        self.novel[idx] = False
        escalate = (
            eligible & (verdict == Arbitration.COGNITION) & (self.escalate_after[idx] <= np.uint64(tick))
        )
        chosen = slots[escalate]
        self.escalate_after[chosen] = np.uint64(tick + self.config.escalation_cooldown_ticks)
        causes = np.where(
            novelty[escalate],
            action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY,
            np.where(
                has_goal[escalate],
                action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD,
                action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL,
            ),
        ).astype(np.uint8)
        return Escalations(chosen, causes)

    def fingerprint_inputs(self) -> Mapping[str, str]:
        """The library's declared version and a digest of its content: an edit that forgot to bump
        `library_version` still changes the kernel's fingerprint."""
        return {
            "library_version": self.library.library_version,
            "content_fnv1a64": fingerprint(dataclasses.asdict(self.library)),
        }

    def snapshot(self) -> Mapping[str, NDArray[np.generic]]:
        """One-dimensional arrays (the kernel's snapshot format); 2-D ones are flattened row-major."""
        arrays = {name: array.reshape(-1).copy() for name, array in self._arrays.items()}
        arrays["quirks"] = np.array([QUIRK_SEPARATOR.join(q) for q in self._quirks], dtype=np.str_)
        return arrays

    def restore_violations(
        self, arrays: Mapping[str, NDArray[np.generic]], agents: int
    ) -> list[FieldViolation]:
        """Everything (named by array) that keeps `arrays` from being this layer's state for a
        population of `agents`: layout, room for every agent, and every value's range."""
        return state_violations(arrays, _ARRAYS, self.methods, agents)

    def restore(self, arrays: Mapping[str, NDArray[np.generic]], agents: int = 0) -> None:
        """Refuses whatever `restore_violations` finds, changing nothing; else takes the arrays.

        Accepts rows flattened (as `snapshot` writes them) or already shaped.
        """
        violations = self.restore_violations(arrays, agents)
        if violations:
            raise InvalidArgument(violations)
        capacity = len(arrays["quirks"])
        self._arrays = {
            name: np.array(arrays[name], copy=True).reshape((*shape, capacity))
            for name, (_, shape) in _ARRAYS.items()
        }
        for name, array in self._arrays.items():
            setattr(self, name, array)
        self.generation += 1
        self._quirks = [tuple(q.split(QUIRK_SEPARATOR)) if q else () for q in arrays["quirks"].tolist()]

    # --- beyond the seam -----------------------------------------------------------------------

    def record_episode(self, slot: int, episode: EmotionalEpisode) -> None:
        """Fold something that happened to the Ori into its mood; the next decision re-reads it."""
        mood = Mood(int(self.mood_valence[slot]), int(self.mood_arousal[slot]), int(self.grief[slot])).fold(
            episode
        )
        self.mood_valence[slot], self.mood_arousal[slot], self.grief[slot] = (
            mood.valence_bp,
            mood.arousal_bp,
            mood.grief_bp,
        )
        self.mood_active[slot] = True

    def report(self, slot: int) -> DecisionReport:
        """The honoured value, quirks, emotion and plan behind the slot's last decision."""
        routine = Routine(int(self.tree_routine[slot]))
        method = int(self.plan_method[slot])
        emotion = Emotion(int(self.emotion[slot]))
        style = EMOTION_STYLES.get(emotion)
        return DecisionReport(
            routine=routine,
            honoured_value=int(self.tree_value[slot]),
            quirks=tuple(
                q
                for q in self._quirks[slot]
                if ":" not in q
                or q.partition(":")[0].strip().lower().replace("-", "_") == routine.name.lower()
            ),
            emotion=emotion,
            dialogue_style=style.dialogue_style if style else "",
            animation_tag=style.animation_tag if style else "",
            goal_ref=int(self.goal[slot]),
            method_id=self.library.methods[method].method_id if method != NO_METHOD else None,
            plan_cursor=int(self.plan_cursor[slot]),
        )

    def method_applies(self, slots: NDArray[np.uint32]) -> NDArray[np.bool_]:
        """Whether each slot's current goal has an applicable method (for arbitration)."""
        index = np.asarray(slots, dtype=np.intp)
        applies: NDArray[np.bool_] = (self.plan_method[index] != NO_METHOD) & (self.goal[index] != 0)
        return applies

    # --- internals -----------------------------------------------------------------------------

    def _evaluate(
        self,
        rows: NDArray[np.intp],
        needs: NDArray[np.uint16],
        fatigue: NDArray[np.uint16],
        flags: NDArray[np.uint16],
        goal_in: NDArray[np.uint32],
    ) -> None:
        """Re-evaluate the rows whose inputs changed (`needs` is (n, 4) in Need order): novelty,
        emotion, personality tree, needs -> goal, re-plan; `_core/moirai_behavior.c` is its C twin."""
        cfg = self.config
        self.novel[rows] |= self.evaluated[rows] & ((flags & ~self.seen_flags[rows] & NOVELTY_FLAGS) != 0)
        emotion = evaluate_emotions(
            MoodRows(self.mood_valence[rows], self.mood_arousal[rows], self.grief[rows]), needs, fatigue, cfg
        )
        vocation = self.vocation_ref[rows]
        tree = evaluate_trees(
            TreeRows(
                traits=self.traits[:, rows],
                values=self.values[:, rows],
                vocation_ref=vocation,
                need_social_bp=needs[:, 2],
                need_purpose_bp=needs[:, 3],
                fatigue_bp=fatigue,
                signal_flags=flags,
                hard_objective_bp=emotion.hard_objective_bp,
            ),
            cfg,
        )
        self.tree_routine[rows] = tree.routine
        self.tree_kind[rows] = tree.action_kind
        self.tree_priority[rows] = tree.priority_bp
        self.tree_value[rows] = tree.honoured_value
        self.emotion[rows] = emotion.emotion
        self.hard_objective_bp[rows] = emotion.hard_objective_bp

        surfaced = surface_goals(
            most_pressing_needs(needs, cfg.need_goal_threshold_bp), vocation, self.need_goals
        )
        adopted = self.cognition_goal[rows]
        goal = np.where(goal_in != 0, goal_in, np.where(adopted != 0, adopted, surfaced))
        tags = goal_tag_masks(goal)
        tags |= np.where(fatigue >= cfg.need_rest_tag_bp, self._rest_bit, 0).astype(np.uint32)
        tags |= np.where((flags & THREAT_FLAG) != 0, self._threat_bit, 0).astype(np.uint32)
        tags |= np.where((flags & MINOR_PRESENT_FLAG) != 0, self._minor_bit, 0).astype(np.uint32)
        replan = (goal != self.goal[rows]) | (tags != self.plan_tags[rows]) | ~self.evaluated[rows]
        if replan.any():
            again = rows[replan]
            chosen = self.methods.select(goal_families(goal[replan]), tags[replan])
            self.plan_method[again] = np.where(goal[replan] != 0, chosen, NO_METHOD)
            self.plan_cursor[again] = 0
        self.goal[rows] = goal
        self.plan_tags[rows] = tags
        method = self.plan_method[rows]
        known = np.maximum(method, 0)
        vocational = self.methods.family[known] == GoalFamily.VOCATION
        weight = np.where(vocational, emotion.hard_objective_bp, BP)
        self.plan_priority[rows] = np.where(
            method != NO_METHOD, self.methods.priority_bp[known] * weight // BP, 0
        ).astype(np.uint16)

        self.seen_safety[rows] = needs[:, 0]
        self.seen_sustaining[rows] = needs[:, 1]
        self.seen_social[rows] = needs[:, 2]
        self.seen_purpose[rows] = needs[:, 3]
        self.seen_fatigue[rows] = fatigue
        self.seen_flags[rows] = flags
        self.seen_goal[rows] = goal_in
        self.evaluated[rows] = True
        self.goal_adopted[rows] = False
        self._settle_mood(rows)

    def _settle_mood(self, rows: NDArray[np.intp]) -> None:
        """Decay mood after it was read (as Mood.decayed); a settled mood stops forcing re-evaluation."""
        shift = self.config.mood_decay_shift
        active = rows[self.mood_active[rows]]
        if len(active) == 0:
            return
        for array in (self.mood_valence, self.mood_arousal, self.grief):
            array[active] -= array[active] >> shift
        self.mood_active[active] = (
            (self.mood_valence[active] != 0) | (self.mood_arousal[active] != 0) | (self.grief[active] != 0)
        )
