"""The run artifact: everything a run produced, validated on write and on read, schema exported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from egbe.v1 import common_pb2

# 2: the bill tells admissions and in-flight kills apart; 3: conversations, moments, featured timelines;
# 4: each call's outcome, the run's outcomes, the ledger's spend over real time, the stopping controls
ARTIFACT_SCHEMA_VERSION: Literal[4] = 4
Count = Annotated[int, Field(ge=0)]
TierName = Literal["clotho", "lachesis", "atropos", "unspecified"]
CallOutcome = Literal["model", "offline", "failed", "stopped", "deferred"]
AnsweredBy = Literal["model", "offline", "mixed", "failed", "none"]
TIER_NAME: dict[int, TierName] = {
    common_pb2.COGNITION_TIER_UNSPECIFIED: "unspecified",
    common_pb2.COGNITION_TIER_CLOTHO: "clotho",
    common_pb2.COGNITION_TIER_LACHESIS: "lachesis",
    common_pb2.COGNITION_TIER_ATROPOS: "atropos",
}


class ArtifactError(ValueError):
    """A run folder or artifact that cannot be trusted: unreadable, invalid, or tampered with."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioRecord(_Strict):
    name: str
    title: str
    fingerprint: str = Field(description="FNV-1a 64 of the canonical scenario JSON.")
    document: dict[str, object] = Field(description="The scenario exactly as validated.")


class Fingerprint(_Strict):
    scope: str
    fnv1a64: str


class TierSeries(_Strict):
    """Per-tick tier counts, one entry per tick run (columns, to keep a game-hour compact)."""

    ticks: list[Count]
    clotho: list[Count]
    lachesis: list[Count]
    atropos: list[Count]
    calls_issued: list[Count]
    estimated_tokens: list[Count]


class IssuedCalls(_Strict):
    """Calls the kernel issued for one tier and cause, with its own token and cost estimates."""

    tier: TierName
    cause: str
    calls: Count
    token_estimate: Count
    cost_estimate_micro_usd: Count


class CognitionCall(_Strict):
    """One model call the gateway ran for this world, as its audit log records it."""

    call_id: str
    run_id: str
    ori_id: str
    tier: TierName
    cause: str
    model: str
    input_tokens: Count
    output_tokens: Count
    cost_micro_usd: Count
    cost_estimated: bool = Field(description="True when priced from an estimate (the offline adapter).")
    policy_decision: str
    outcome: CallOutcome = Field(
        description="model: a model answered; offline: the offline adapter answered; failed: no answer "
        "(error_class says why); stopped: a control or the caller ended it (error_class killed, cancelled); "
        "deferred: never sent, its providers' rate limits had no turn for it before its deadline."
    )
    error_class: str = Field(description="The gateway audit's error class; empty when the call was answered.")
    fallback: str = Field(
        description="Cognition's fallback reason when the call's run reached the world as its validation or "
        "policy fallback (a template line); empty otherwise."
    )
    issued_at_tick: Count | None = Field(
        description="The tick the kernel issued the call on (from its kernel call id); None if unnamed."
    )
    merged_at_tick: Count | None = Field(
        description="The tick the run's result re-entered the world; None if it never did."
    )


class CallOutcomes(_Strict):
    """What became of the model calls run (one gateway audit record each) and of their runs' results."""

    answered_by_model: Count
    answered_offline: Count
    failed: Count = Field(description="Model calls that got no answer (provider error, timeout, ...).")
    failed_by_class: dict[str, Count] = Field(description="The failed calls by the audit's error class.")
    stopped: Count = Field(description="Model calls a control or the caller ended in flight.")
    deferred: Count = Field(
        default=0,
        description="Model calls never sent: their providers' rate limits had no turn before the deadline.",
    )
    fallbacks: Count = Field(
        description="Runs whose result reached the world as cognition's validation or policy fallback."
    )
    fallback_reasons: dict[str, Count]


class SpendPoll(_Strict):
    """One reading of the gateway's ledger during the run: what it had charged this run so far."""

    tick: Count = Field(description="Ticks run when the ledger answered.")
    elapsed_seconds: float = Field(description="Real seconds since the run's first tick was sent.")
    tokens_charged: Count
    micro_usd_charged: Count
    world_cap_tokens: Count = Field(description="The world cap per ledger window (an hour) at that reading.")


class ControlRecord(_Strict):
    """An operator control that stopped at least one of this run's calls."""

    control_id: str
    kind: str = Field(description="kill, pause or quarantine.")
    scope: str = Field(description="ori, tier, tenant or world.")
    target: str
    world_id: str = Field(description="The one world it applies in; empty = every world.")
    reason: str
    operator_id: str
    created_at: str = Field(description="UTC, ISO 8601.")
    expires_at: str | None = Field(description="UTC, ISO 8601; None = until resumed.")
    left_over: bool = Field(description="Created before this run began (by an operator or an earlier run).")
    calls_stopped: Count = Field(
        description="This run's calls it stopped: refused at admission while in force, or ended in flight."
    )


class KillRecord(_Strict):
    """An operator kill switch and what it did to the run."""

    at_tick: Count
    kind: str
    target: str
    reason: str
    applied: bool = Field(description="False when the gateway refused or could not throw the switch.")
    detail: str = Field(description="The control id, or why the switch was not thrown.")
    calls_issued_after: Count = Field(description="Calls the kernel issued for the target after the kill.")
    calls_run_after: Count = Field(
        description="Runs for the target whose results reached the world after it."
    )
    actions_after: Count = Field(
        description="Ticks on which the target still acted (the believability floor)."
    )


class DirectiveRecord(_Strict):
    at_tick: Count
    ori_id: str
    steward: str
    kind: str
    text: str
    allowed: bool
    classified_kind: str
    reclassified: bool
    policy_ref: str
    answer: str = Field(description="The Ori's answering action kind.")


class TimelineEntry(_Strict):
    """One biography event of a featured Ori."""

    tick: Count
    kind: str = Field(description="The event kind: identity_registered, memory_formed, reflected, ...")
    text: str


class BiographySummary(_Strict):
    ori_id: str
    name: str
    featured: bool
    events: Count
    by_kind: dict[str, Count]
    lines: list[str] = Field(description="The Ori's life as its biography tells it, oldest first.")
    chain_ok: bool | None = Field(description="The stream's hash chain verified; None if not checked.")
    timeline: list[TimelineEntry] = Field(
        default_factory=list, description="A featured Ori's events in tick order (empty for the others)."
    )


class SpokenPlanBudget(_Strict):
    """The budget figures of the reply's Psyche spoken-reply plan."""

    end_to_end_budget_ms: Count
    stages_total_ms: Count
    within_budget: bool
    overran_stages: list[str]


class ConversationRecord(_Strict):
    """A line the player said to an Ori and the Ori's reply; a line never answered is kept, unanswered."""

    line_tick: Count = Field(description="The tick the line was said (sent with that tick's perception).")
    line: str
    speaker_id: str
    speaker_name: str
    ori_id: str = Field(description="The addressed Ori.")
    ori_name: str
    answered: bool
    reply: str = ""
    locale: str = ""
    reply_tick: Count | None = Field(default=None, description="The tick whose actions carried the reply.")
    latency_ticks: Count | None = None
    latency_ms: float | None = Field(
        default=None,
        description="Wall time from sending the batch with the line to receiving the result with the reply.",
    )
    tier: TierName | None = None
    source: Literal["model", "offline", "template-fallback"] | None = None
    run_id: str = Field(default="", description="The gateway run that produced the reply.")
    model_ms: float | None = Field(default=None, description="Adapter time of the run's model calls.")
    dispatch_ms: float | None = Field(
        default=None, description="From the tick that issued the call to the gateway's answer."
    )
    plan: SpokenPlanBudget | None = None


class MomentDecision(_Strict):
    """A cognition result for the Ori at a crossroads or before an irreversible action."""

    tick: Count = Field(description="The tick the result reached the world.")
    mode: str
    run_id: str
    offline: bool
    choice: str = Field(description="What the Ori chose or said: a decision's action and target, a line.")
    rationale: str = ""
    chosen_option: str = Field(default="", description="The crossroads option the choice names, if any.")


class MomentRecord(_Strict):
    """A crossroads or an irreversible action, and what the Ori's mind made of it."""

    kind: Literal["crossroads", "irreversible_action"]
    id: str
    ori_id: str
    ori_name: str
    first_tick: Count
    last_tick: Count
    text: str = Field(description="The crossroads prompt, or the action's description.")
    options: list[str]
    decisions: list[MomentDecision] = Field(
        description="Results that reached the world from the window's first tick to its last plus a grace."
    )


class TierSpend(_Strict):
    tier: TierName
    calls: Count
    tokens: Count
    micro_usd: Count


class Bill(_Strict):
    """What the run cost, from the gateway's ledger, and what it would have cost naively."""

    world_cap_tokens: Count
    consumed_tokens: Count = Field(description="Tokens charged: what the gateway's ledger charged this run.")
    consumed_micro_usd: Count = Field(description="What the ledger charged this run, in micro-USD.")
    blocked_by_world_cap: Count
    by_tier: list[TierSpend]
    calls_issued: Count = Field(description="Calls issued: cognition calls the kernel issued over the run.")
    model_calls_run: Count = Field(
        description="Model calls run: model calls the gateway's audit log holds for this run's calls."
    )
    admissions: Count = Field(description="Runs the gateway admitted for this run's calls.")
    killed: Count = Field(description="Calls refused under a kill switch, and admitted runs a kill ended.")
    killed_in_flight: Count = Field(
        description="Admitted runs a kill switch ended in flight (in killed too)."
    )
    naive_calls: Count = Field(description="Every Ori thinking on every tick: agents x ticks.")
    naive_tokens: Count
    naive_micro_usd: Count
    relevance_ratio: float = Field(description="calls_issued / naive_calls: what relevance tiering kept.")


class BudgetTier(_Strict):
    tier: TierName
    requests: Count
    requested_tokens: Count
    allowed_tokens: Count
    deferred_tokens: Count


class Saturation(_Strict):
    """The run's cognition demand over its window, scaled to a game-hour, against the world cap."""

    window_ticks: Count
    world_cap_tokens: Count
    total_allowed_tokens: Count
    total_deferred_tokens: Count
    world_cap_held: bool
    tiers: list[BudgetTier]


class ReplayCheck(_Strict):
    checked: bool
    matches: bool | None = None
    divergence: str = ""
    recorded: str = ""
    fresh: str = ""
    ticks_compared: Count = 0


class TickLogRecord(_Strict):
    path: str
    sha256: str
    frames: Count


class SnapshotRecord(_Strict):
    tick: Count
    world_path: str
    kernel_path: str


class RunArtifact(_Strict):
    """One run of a scenario against the services; `schema/run-artifact.schema.json` is this model."""

    schema_version: Literal[4] = ARTIFACT_SCHEMA_VERSION
    run_id: str
    created_at: str = Field(description="UTC wall-clock time the run started (not used by the run).")
    egbe_version: str
    scenario: ScenarioRecord
    seed: int
    ticks_run: Count
    reduced_time: bool
    answered_by: AnsweredBy = Field(
        description="Who answered the model calls run (stopped calls aside): model or offline when that one "
        "answered every call; mixed when both did, or some failed; failed when calls ran and none was "
        "answered; none when no model call ran."
    )
    outcomes: CallOutcomes
    config_fingerprints: list[Fingerprint]
    population: dict[str, Count]
    featured: list[str]
    tiers: TierSeries
    issued: list[IssuedCalls]
    calls: list[CognitionCall]
    kills: list[KillRecord]
    directives: list[DirectiveRecord]
    biographies: list[BiographySummary]
    conversations: list[ConversationRecord] = Field(description="Every line the player said, in tick order.")
    moments: list[MomentRecord] = Field(description="Each crossroads and irreversible action, in tick order.")
    bill: Bill
    spend: list[SpendPoll] = Field(description="The ledger's charge for this run, polled over real time.")
    controls: list[ControlRecord] = Field(description="Every control that stopped one of this run's calls.")
    saturation: Saturation | None = None
    replay: ReplayCheck
    tick_log: TickLogRecord | None
    snapshots: list[SnapshotRecord]
    forked_from: dict[str, object] | None = None
    wall_seconds: float = Field(description="The whole run, services' drain and collection included.")
    loop_seconds: float = Field(description="The tick loop alone: perception out, actions back.")


def write_artifact(artifact: RunArtifact, path: Path) -> None:
    path.write_text(artifact.model_dump_json(indent=1) + "\n")


def read_artifact(path: Path) -> RunArtifact:
    """Load and validate; a corrupted or hand-edited artifact is refused with the fields that are wrong."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ArtifactError(f"artifact {path} is unreadable: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"artifact {path} is not valid JSON ({exc}); it is corrupted") from exc
    try:
        return RunArtifact.model_validate(raw)
    except ValidationError as exc:
        where = "; ".join(".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors()[:10])
        raise ArtifactError(f"artifact {path} does not match the run-artifact schema: {where}") from exc
