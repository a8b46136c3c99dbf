"""What the world hears back from the Ori's minds: replies to the player's lines, and the decisions an
Ori took at a crossroads or before an irreversible action.

A reply is a cognition result in dialogue mode whose payload carries a "speech" object naming the
line it answers (`addressed_to` the speaker, `heard_tick` the tick the line was said). The world
matches it to the line it sent on that tick to that Ori; a line with no reply by the end of the run
is recorded as unanswered, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from google.protobuf import json_format, struct_pb2

from egbe.v1 import action_pb2
from world.artifact import (
    TIER_NAME,
    ConversationRecord,
    MomentDecision,
    MomentRecord,
    SpokenPlanBudget,
    TierName,
)
from world.population import Population
from world.script import ScriptIndex, Window

# A moment's decisions are the results of calls issued inside its window; such a result reaches the
# world a tick or more later, so results are kept until this many ticks after the window closes.
MOMENT_MERGE_TICKS = 1_200
SOURCES = ("model", "offline", "template-fallback")


@dataclass(frozen=True)
class CognitionResult:
    """A merged cognition result in a tick's actions: the Ori's slot, its tier and the payload."""

    slot: int
    tier: int
    payload: struct_pb2.Struct


def cognition_results(actions: action_pb2.ActionBatch) -> list[CognitionResult]:
    """The merged cognition results of a tick, from rows (intents) or columns (sparse payloads): the
    payloads naming the gateway run that produced them ("run_id"), whatever source the action has (a
    guard that fired on the merge tick keeps its action, the result its payload). An Ori holding a
    cognition action over later ticks repeats its source, not a new result.
    """
    if actions.intents:
        return [
            CognitionResult(i.slot, i.tier, i.payload)
            for i in actions.intents
            if "run_id" in i.payload.fields
        ]
    columns = actions.columns
    found = [p for p in columns.payloads if "run_id" in p.payload.fields]
    if not found:
        return []
    tiers = np.frombuffer(columns.tier, dtype="u1")
    slots = np.frombuffer(columns.slots, dtype="<u4") if columns.slots else None

    def tier_of(slot: int) -> int:
        at = np.flatnonzero(slots == slot) if slots is not None else np.array([slot])
        return int(tiers[at[0]]) if at.size and at[0] < tiers.size else 0

    return [CognitionResult(p.slot, tier_of(p.slot), p.payload) for p in found]


@dataclass(frozen=True)
class Speech:
    """A dialogue result's "speech" object: the line the Ori said and the line it answered."""

    slot: int
    tier: int
    text: str
    locale: str
    addressed_to: str
    heard_tick: int
    source: str
    run_id: str
    model_us: float | None
    dispatch_us: float | None
    plan: SpokenPlanBudget | None


def speech_of(result: CognitionResult) -> Speech | None:
    """The speech a result carries, or None when it is not a dialogue reply with a "speech" object."""
    fields = result.payload.fields
    if fields.get("mode", struct_pb2.Value()).string_value != "dialogue" or "speech" not in fields:
        return None
    payload: dict[str, Any] = json_format.MessageToDict(result.payload)
    speech = payload["speech"]
    if not isinstance(speech, dict):
        return None
    plan = payload.get("spoken_reply")
    return Speech(
        slot=result.slot,
        tier=result.tier,
        text=str(speech.get("text", "")),
        locale=str(speech.get("locale", "")),
        addressed_to=str(speech.get("addressed_to", "")),
        heard_tick=int(speech.get("heard_tick", -1)),
        source=str(speech.get("source", "")),
        run_id=str(payload.get("run_id", "")),
        model_us=_number(payload.get("model_us")),
        dispatch_us=_number(payload.get("dispatch_us")),
        plan=_plan_budget(plan) if isinstance(plan, dict) else None,
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _plan_budget(plan: dict[str, Any]) -> SpokenPlanBudget:
    """Budget figures of a SpokenReplyPlan as protobuf JSON (either field-name style; defaults omitted)."""

    def get(name: str, camel: str, default: object) -> Any:
        return plan.get(name, plan.get(camel, default))

    return SpokenPlanBudget(
        end_to_end_budget_ms=int(get("end_to_end_budget_ms", "endToEndBudgetMs", 0)),
        stages_total_ms=int(get("stages_total_ms", "stagesTotalMs", 0)),
        within_budget=bool(get("within_budget", "withinBudget", False)),
        overran_stages=[str(s) for s in get("overran_stages", "overranStages", [])],
    )


@dataclass
class _Line:
    tick: int
    row: int
    text: str
    sent_at: float
    record: ConversationRecord | None = None


@dataclass
class _Moment:
    kind: Literal["crossroads", "irreversible_action"]
    id: str
    window: Window
    text: str
    options: list[str]
    merged: list[tuple[int, struct_pb2.Struct]] = field(default_factory=list)  # (tick it came back, payload)
    runs: set[str] = field(default_factory=set)  # gateway runs already in `merged`


class StoryRecorder:
    """Fed by the loop on every tick: the lines it sent, and the cognition results it received."""

    def __init__(self, population: Population, script: ScriptIndex) -> None:
        self.population = population
        self.script = script
        self.lines: dict[tuple[int, int], _Line] = {}  # (row, tick) -> the line said to that Ori
        self.moments = [
            _Moment("crossroads", c.crossroads_id, window, c.prompt, list(c.options))
            for window, c in script.crossroads
        ] + [
            _Moment("irreversible_action", irreversible_id(population.ids[w.row], w.last), w, text, [])
            for w, text in script.irreversible
        ]
        self.moments.sort(key=lambda m: (m.window.first, m.window.row))
        self.moment_rows = {m.window.row for m in self.moments}

    def sent(self, tick: int, sent_at: float) -> None:
        """The batch for `tick` left at monotonic time `sent_at`, with the player's lines of that tick."""
        for row, text in self.script.addressed.get(tick, ()):
            self.lines[(row, tick)] = _Line(tick, row, text, sent_at)

    def received(self, tick: int, results: list[CognitionResult], received_at: float) -> None:
        """The result for `tick` arrived at monotonic time `received_at` carrying `results`."""
        for result in results:
            speech = speech_of(result)
            if speech is not None:
                self._reply(tick, speech, received_at)
            if result.slot in self.moment_rows:
                self._decision(tick, result)

    def _reply(self, tick: int, speech: Speech, received_at: float) -> None:
        line = self.lines.get((speech.slot, speech.heard_tick))
        if line is None or line.record is not None or speech.addressed_to != self.script.speaker_id:
            return
        line.record = self._record(line).model_copy(
            update={
                "answered": True,
                "reply": speech.text,
                "locale": speech.locale,
                "reply_tick": tick,
                "latency_ticks": tick - line.tick,
                "latency_ms": round((received_at - line.sent_at) * 1_000, 3),
                "tier": TIER_NAME.get(speech.tier, "unspecified"),
                "source": speech.source if speech.source in SOURCES else None,
                "run_id": speech.run_id,
                "model_ms": None if speech.model_us is None else round(speech.model_us / 1_000, 3),
                "dispatch_ms": None if speech.dispatch_us is None else round(speech.dispatch_us / 1_000, 3),
                "plan": speech.plan,
            }
        )

    def _decision(self, tick: int, result: CognitionResult) -> None:
        for moment in self.moments:
            window = moment.window
            if window.row == result.slot and window.first <= tick <= window.last + MOMENT_MERGE_TICKS:
                run_id = result.payload.fields["run_id"].string_value
                if run_id not in moment.runs:
                    moment.runs.add(run_id)
                    moment.merged.append((tick, result.payload))

    def _record(self, line: _Line) -> ConversationRecord:
        return ConversationRecord(
            line_tick=line.tick,
            line=line.text,
            speaker_id=self.script.speaker_id,
            speaker_name=self.script.player_name,
            ori_id=self.population.ids[line.row],
            ori_name=self.population.rows[line.row].name,
            answered=False,
        )

    def conversations(self, call_tiers: dict[str, TierName]) -> list[ConversationRecord]:
        """Every line sent, in tick order; those without a reply are unanswered. A reply's tier is the
        tier its call ran at (`call_tiers`, by gateway run id, from the audit), which the Ori may have
        left by the tick the reply arrived; the arrival tick's tier stands in for a run not audited."""
        ordered = sorted(self.lines.values(), key=lambda line: (line.tick, line.row))
        records = [line.record or self._record(line) for line in ordered]
        return [
            r.model_copy(update={"tier": call_tiers[r.run_id]}) if r.run_id in call_tiers else r
            for r in records
        ]

    def moment_records(self, issued_at: dict[str, int]) -> list[MomentRecord]:
        """Each moment with the results of the calls issued inside its window; `issued_at` maps a
        gateway run id to the tick the kernel issued its call (from the audit, see `issue_ticks`); a
        run it does not name counts as issued on the tick its result came back."""

        def inside(m: _Moment, tick: int, payload: struct_pb2.Struct) -> bool:
            return m.window.holds(issued_at.get(payload.fields["run_id"].string_value, tick))

        return [
            MomentRecord(
                kind=m.kind,
                id=m.id,
                ori_id=self.population.ids[m.window.row],
                ori_name=self.population.rows[m.window.row].name,
                first_tick=m.window.first,
                last_tick=m.window.last,
                text=m.text,
                options=m.options,
                decisions=[decision_of(t, p, m.options) for t, p in m.merged if inside(m, t, p)],
            )
            for m in self.moments
        ]


def issue_ticks(kernel_call_ids: dict[str, str]) -> dict[str, int]:
    """Run id -> the tick the kernel issued the call, from its call id "<world>:<tick>:<slot>:<cause>"."""
    out = {}
    for run_id, call_id in kernel_call_ids.items():
        parts = call_id.rsplit(":", 3)
        if len(parts) == 4 and parts[1].isdigit():
            out[run_id] = int(parts[1])
    return out


def irreversible_id(ori_id: str, at_tick: int) -> str:
    return f"irreversible-{ori_id}-{at_tick}"


def decision_of(tick: int, payload: struct_pb2.Struct, options: list[str]) -> MomentDecision:
    """The gist of a cognition result: a decision's action and target, a line, an insight or a summary."""
    raw: dict[str, Any] = json_format.MessageToDict(payload)
    reply = raw["reply"] if isinstance(raw.get("reply"), dict) else {}
    if "action" in reply:
        choice = f"{reply['action']} {reply.get('target', '')}".strip()
    else:
        choice = str(next((reply[k] for k in ("utterance", "insight", "summary") if k in reply), ""))
    rationale = str(reply.get("rationale", ""))
    said = f"{choice} {rationale}".casefold()
    chosen = next((o for o in options if o.casefold() in said), "")
    return MomentDecision(
        tick=tick,
        mode=str(raw.get("mode", "")),
        run_id=str(raw.get("run_id", "")),
        offline=bool(raw.get("offline", False)),
        choice=choice,
        rationale=rationale,
        chosen_option=chosen,
    )
