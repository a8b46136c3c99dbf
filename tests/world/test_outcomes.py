"""What became of a run's calls, as the artifact, the console and the report say it."""

from __future__ import annotations

import io
import re
from pathlib import Path

from google.protobuf import timestamp_pb2

from egbe.v1 import gateway_pb2
from tests.world.recorded_run import recorded_artifact
from world.artifact import CognitionCall, RunArtifact, SpendPoll
from world.controls import IssuedCall, RunScope, stopping_controls
from world.demo import exit_status, summary
from world.outcomes import answered_by, call_outcome, outcomes
from world.progress import Progress, ProgressBar
from world.report import render_report


def _call(
    n: int, outcome: str, error_class: str = "", fallback: str = "", ori: str = "adaeze"
) -> CognitionCall:
    return CognitionCall(
        call_id=f"run-{n}:1",
        run_id=f"run-{n}",
        ori_id=ori,
        tier="clotho",
        cause="dialogue",
        model="anthropic:claude",
        input_tokens=0,
        output_tokens=0,
        cost_micro_usd=0,
        cost_estimated=False,
        policy_decision="p:admitted",
        outcome=outcome,  # type: ignore[arg-type]
        error_class=error_class,
        fallback=fallback,
        issued_at_tick=n,
        merged_at_tick=None,
    )


def _failed_run() -> tuple[RunArtifact, list[CognitionCall]]:
    calls = [_call(i, "failed", "network") for i in range(140)] + [
        _call(200 + i, "failed", "timeout") for i in range(4)
    ]
    artifact = recorded_artifact()
    artifact.calls = calls
    artifact.outcomes = outcomes(calls)
    artifact.answered_by = answered_by(artifact.outcomes)
    artifact.bill.model_calls_run = len(calls)
    artifact.bill.calls_issued = 144
    artifact.bill.killed = 0
    return artifact, calls


def test_the_audit_record_decides_each_calls_outcome() -> None:
    record = gateway_pb2.AuditRecord
    assert call_outcome(record()) == "model"
    assert call_outcome(record(offline=True)) == "offline"
    assert call_outcome(record(error_class="network")) == "failed"
    assert call_outcome(record(error_class="killed")) == "stopped"
    assert call_outcome(record(error_class="cancelled", offline=True)) == "stopped"
    assert call_outcome(record(error_class="deferred")) == "deferred"


def test_a_run_whose_every_model_call_failed_says_so_and_exits_non_zero() -> None:
    artifact, _ = _failed_run()
    assert artifact.outcomes.failed_by_class == {"network": 140, "timeout": 4}
    assert artifact.answered_by == "failed"
    text = summary(Path("runs/x"), artifact)
    first = text.splitlines()[0]
    assert (
        first == "FAILED: none of the 144 model calls run was answered; 144 failed (network 140, timeout 4)"
    )
    assert "MODEL" not in text
    assert (
        "FAILED     no call was answered: all 144 model calls run failed (network 140, timeout 4)"
        " of 144 calls issued" in text
    )
    assert exit_status(artifact) == 1
    body = render_report(artifact).split("<body>", 1)[1]
    assert body.startswith(
        '<p class="banner failed">FAILED: none of the 144 model calls run was answered; 144 failed'
    )
    assert "MODEL" not in body.split("</p>", 1)[0]


def test_a_mixed_run_counts_each_outcome_and_fallbacks_by_run() -> None:
    calls = [
        _call(1, "model"),
        _call(2, "model", fallback="quality_blocked"),
        _call(3, "failed", "rate_limit"),
        _call(4, "stopped", "killed"),
    ]
    o = outcomes(calls)
    assert (o.answered_by_model, o.answered_offline, o.failed, o.stopped, o.fallbacks) == (2, 0, 1, 1, 1)
    assert o.fallback_reasons == {"quality_blocked": 1}
    assert answered_by(o) == "mixed"
    assert answered_by(outcomes(calls[:2] + calls[3:])) == "model"  # a call stopped in flight did not fail
    assert answered_by(outcomes([])) == "none"


def test_calls_a_rate_limit_deferred_are_counted_apart_and_fail_nothing() -> None:
    calls = [_call(1, "model"), _call(2, "deferred", "deferred"), _call(3, "deferred", "deferred")]
    o = outcomes(calls)
    assert (o.answered_by_model, o.failed, o.stopped, o.deferred) == (1, 0, 0, 2)
    assert answered_by(o) == "model"
    artifact = recorded_artifact()
    artifact.calls, artifact.outcomes = calls, o
    assert "0 stopped in flight, 2 deferred by their providers' rate limits;" in render_report(artifact)


def test_the_progress_line_shows_the_ledger_never_a_made_up_zero() -> None:
    bar = ProgressBar(1_200, stream=io.StringIO())
    before = bar.line(Progress(1, (0, 10, 2), 0, None, None))
    assert before.endswith("| calls issued 0 | tokens charged …")
    after = bar.line(Progress(201, (1, 9, 2), 22, 4_117_115, 96_000_000))
    assert after.endswith("| calls issued 22 | tokens charged 4.1M of 96.0M cap")
    assert "0/0" not in before + after
    assert "est" not in before + after


def test_the_spend_chart_draws_the_ledger_polls_against_the_cap() -> None:
    artifact = recorded_artifact()
    artifact.spend = [
        SpendPoll(tick=t, elapsed_seconds=s, tokens_charged=c, micro_usd_charged=c, world_cap_tokens=60_000)
        for t, s, c in ((0, 0.0, 0), (1, 0.5, 0), (201, 10.0, 20_000), (400, 36.0, 56_650))
    ]
    html = render_report(artifact)
    figure = html.split("Tokens the gateway&#x27;s ledger charged this run, over real time", 1)[1].split(
        "</figure>"
    )[0]
    lines = dict(
        re.findall(r'<polyline class="mark" points="([^"]+)"[^>]*><title>([^:<]+):', figure)[i][::-1]
        for i in range(3)
    )
    charged = [tuple(map(float, p.split(","))) for p in lines["tokens charged (ledger)"].split()]
    assert len(charged) == 4
    # x is the real seconds, y the ledger's tokens: the points keep the polls' proportions
    xs = [x for x, _ in charged]
    assert [round((x - xs[0]) / (xs[-1] - xs[0]), 2) for x in xs] == [
        0.0,
        round(0.5 / 36, 2),
        round(10 / 36, 2),
        1.0,
    ]
    ys = [y for _, y in charged]
    assert ys[0] == ys[1]
    assert ys[0] > ys[2] > ys[3]
    assert round((ys[0] - ys[2]) / (ys[0] - ys[3]), 2) == round(20_000 / 56_650, 2)
    assert "world cap per window" in lines
    assert "cap per hour × elapsed hours" in lines
    assert "estimated" not in figure
    assert "an estimate, not a charge" in html


def test_issued_against_naive_is_drawn_on_a_log_scale() -> None:
    artifact = recorded_artifact()
    artifact.bill.calls_issued, artifact.bill.naive_calls = 756, 43_200
    html = render_report(artifact)
    figure = html.split("every-agent-every-tick design", 1)[1].split("</figure>")[0]
    heights = dict(
        re.findall(r'height="([\d.]+)" fill="[^"]+"><title>calls (\w+):', figure)[i][::-1] for i in range(2)
    )
    assert float(heights["issued"]) > 0.55 * float(heights["naive"])  # log10 756 / log10 43,200 of the plot
    assert "calls (log scale)" in figure


def _stamp(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def test_the_controls_that_stopped_calls_are_listed_left_over_or_not() -> None:
    left = gateway_pb2.Control(
        control_id="ctl-old",
        kind=gateway_pb2.CONTROL_KIND_KILL,
        scope=gateway_pb2.CONTROL_SCOPE_ORI,
        target="adaeze",
        reason="an earlier run",
        operator_id="op",
        created_at=_stamp(1_000),
        active=True,
    )
    thrown = gateway_pb2.Control(
        control_id="ctl-new",
        kind=gateway_pb2.CONTROL_KIND_KILL,
        scope=gateway_pb2.CONTROL_SCOPE_TIER,
        target="lachesis",
        world_id="hamlet-7",
        reason="mid-run",
        operator_id="op",
        created_at=_stamp(5_500),
        expires_at=_stamp(7_000),
        active=True,
    )
    elsewhere = gateway_pb2.Control(
        control_id="ctl-other-world",
        kind=gateway_pb2.CONTROL_KIND_KILL,
        scope=gateway_pb2.CONTROL_SCOPE_ORI,
        target="kunle",
        world_id="another-world",
        created_at=_stamp(1_000),
        active=True,
    )
    issued = [
        IssuedCall(1, "adaeze", "clotho", 5_000),  # stopped by ctl-old
        IssuedCall(2, "adaeze", "clotho", 5_050),  # ran: the audit has it
        IssuedCall(3, "kunle", "lachesis", 6_000),  # stopped by ctl-new
        IssuedCall(4, "kunle", "lachesis", 8_000),  # after ctl-new expired: not its doing
        IssuedCall(5, "kunle", "clotho", 6_000),  # ctl-other-world is another world's
    ]
    ran = [_call(2, "model")]
    records = stopping_controls(
        [left, elsewhere], [left, thrown, elsewhere], RunScope("hamlet-7", "tenant", 5_000), issued, ran
    )
    assert [(r.control_id, r.left_over, r.calls_stopped, r.scope, r.world_id) for r in records] == [
        ("ctl-old", True, 1, "ori", ""),
        ("ctl-new", False, 1, "tier", "hamlet-7"),
    ]
    assert records[1].expires_at == "1970-01-01T00:00:07Z"
    artifact = recorded_artifact()
    artifact.controls = records
    text = summary(Path("runs/x"), artifact)
    assert (
        "control    kill ori adaeze in every world (ctl-old; left over from before the run; created "
        "1970-01-01T00:00:01Z, until resumed): stopped 1 calls; reason: an earlier run"
    ) in text
    assert "kill tier lachesis in world hamlet-7 (ctl-new; thrown during the run" in text
    assert "Controls that stopped this run's calls" in render_report(artifact)
