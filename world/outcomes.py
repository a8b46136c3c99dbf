"""What became of a run's calls, said the same way in the artifact, the console and the report.

The three figures a reader meets everywhere have one definition each: "calls issued" (the kernel's
cognition calls), "model calls run" (the gateway's audit records for them) and "tokens charged" (the
gateway's ledger). A model call is answered by a model, answered by the offline adapter, failed (the
audit's error class says why), stopped (a control or its caller ended it) or deferred (never sent: its
providers' rate limits had no turn for it before its deadline); a run whose result
reached the world as cognition's validation or policy fallback is counted as a fallback.
"""

from __future__ import annotations

from collections import Counter

from egbe.v1 import gateway_pb2
from world.artifact import AnsweredBy, CallOutcome, CallOutcomes, CognitionCall, ControlRecord, RunArtifact

STOPPED_CLASSES = frozenset({"killed", "cancelled"})
# A call its providers' rate limits had no turn for: never sent, and not a failure.
DEFERRED_CLASS = "deferred"


def call_outcome(record: gateway_pb2.AuditRecord) -> CallOutcome:
    if record.error_class in STOPPED_CLASSES:
        return "stopped"
    if record.error_class == DEFERRED_CLASS:
        return "deferred"
    if record.error_class:
        return "failed"
    return "offline" if record.offline else "model"


def issue_tick(kernel_call_id: str) -> int | None:
    """The issuing tick of a kernel call id `<world>:<tick>:<slot>:<cause>` (None if it names none)."""
    parts = kernel_call_id.rsplit(":", 3)
    return int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None


def outcomes(calls: list[CognitionCall]) -> CallOutcomes:
    by = Counter(c.outcome for c in calls)
    fallbacks = {c.run_id: c.fallback for c in calls if c.fallback}
    return CallOutcomes(
        answered_by_model=by["model"],
        answered_offline=by["offline"],
        failed=by["failed"],
        failed_by_class=dict(sorted(Counter(c.error_class for c in calls if c.outcome == "failed").items())),
        stopped=by["stopped"],
        deferred=by["deferred"],
        fallbacks=len(fallbacks),
        fallback_reasons=dict(sorted(Counter(fallbacks.values()).items())),
    )


def answered_by(o: CallOutcomes) -> AnsweredBy:
    answered = o.answered_by_model + o.answered_offline
    if not answered:
        return "failed" if o.failed else "none"
    if o.failed or (o.answered_by_model and o.answered_offline):
        return "mixed"
    return "model" if o.answered_by_model else "offline"


def classes(by_class: dict[str, int]) -> str:
    """ "timeout 140, rate_limit 4": counts by error class, largest first."""
    return ", ".join(f"{name} {n:,}" for name, n in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0])))


def model_path_failure(artifact: RunArtifact) -> str:
    """Why the model path failed entirely (calls issued, none answered), or "" when it did not.

    Calls every one of which a control or the world cap stopped did not fail: they were refused."""
    bill, o = artifact.bill, artifact.outcomes
    if not bill.calls_issued or o.answered_by_model or o.answered_offline:
        return ""
    if bill.killed + bill.blocked_by_world_cap >= bill.calls_issued:
        return ""
    if o.failed:
        return (
            f"no call was answered: all {o.failed:,} model calls run failed ({classes(o.failed_by_class)})"
            f" of {bill.calls_issued:,} calls issued"
        )
    return f"no call was answered: the gateway ran none of the {bill.calls_issued:,} calls issued"


def headline(artifact: RunArtifact) -> tuple[str, str]:
    """The run's first line, as the console and the report's banner both say it: (LABEL, sentence)."""
    o, run = artifact.outcomes, artifact.bill.model_calls_run
    parts = []
    if o.answered_by_model:
        parts.append(f"a model answered {o.answered_by_model:,} of {run:,} model calls run")
    if o.answered_offline:
        parts.append(f"the offline adapter answered {o.answered_offline:,} of {run:,}")
    if o.failed:
        if not parts:
            parts.append(f"none of the {run:,} model calls run was answered")
        parts.append(f"{o.failed:,} failed ({classes(o.failed_by_class)})")
    if o.stopped:
        parts.append(f"{o.stopped:,} stopped in flight")
    if o.fallbacks:
        parts.append(f"{o.fallbacks:,} runs fell back ({classes(o.fallback_reasons)})")
    label = artifact.answered_by.upper()
    if artifact.answered_by == "offline":
        parts.append("nothing came from a language model (no ANTHROPIC_API_KEY, or offline configured)")
    if artifact.answered_by == "none":
        return label, f"no model call ran for the {artifact.bill.calls_issued:,} calls issued"
    return label, "; ".join(parts)


def figures(artifact: RunArtifact) -> list[tuple[str, str]]:
    """The run's three figures, named and formatted as the console and the report both show them."""
    bill = artifact.bill
    return [
        ("calls issued", f"{bill.calls_issued:,}"),
        ("model calls run", f"{bill.model_calls_run:,}"),
        ("tokens charged", f"{bill.consumed_tokens:,} (${bill.consumed_micro_usd / 1e6:,.4f})"),
    ]


def describe_control(c: ControlRecord) -> str:
    """One line per control: what it is, where it applies, since when, and what it stopped."""
    where = f"in world {c.world_id}" if c.world_id else "in every world"
    until = f"until {c.expires_at}" if c.expires_at else "until resumed"
    origin = "left over from before the run" if c.left_over else "thrown during the run"
    return (
        f"{c.kind} {c.scope} {c.target} {where} ({c.control_id}; {origin}; created {c.created_at}, "
        f"{until}): stopped {c.calls_stopped:,} calls; reason: {c.reason or 'none given'}"
    )
