"""The report's bill sections: the banner that says who answered, the spend the ledger charged over real
time against the world cap, what became of the calls, the controls that stopped them, and a fork's bill
beside its parent's."""

from __future__ import annotations

from html import escape

from world.artifact import RunArtifact, SpendPoll
from world.charts import lines
from world.outcomes import classes, describe_control, figures, headline, model_path_failure

BANNER_CLASS = {
    "model": "model",
    "offline": "offline",
    "mixed": "mixed",
    "failed": "failed",
    "none": "failed",
}
HOUR_SECONDS = 3_600.0
CAP_ON_SCALE = 4.0  # the window cap is drawn when it is at most this many times the chart's other lines


def banner(artifact: RunArtifact) -> str:
    label, sentence = headline(artifact)
    failure = model_path_failure(artifact)
    tail = f" The model path failed: {escape(failure)}." if failure else ""
    return f'<p class="banner {BANNER_CLASS[artifact.answered_by]}">{label}: {escape(sentence)}.{tail}</p>'


def figures_line(artifact: RunArtifact) -> str:
    return " · ".join(f"{name}: <b>{escape(value)}</b>" for name, value in figures(artifact))


def spend_section(artifact: RunArtifact) -> str:
    """The ledger's charge polled over the run's real seconds, against the world cap per ledger window
    and against the cap's hourly pace over the same seconds; the kernel's estimate only in words."""
    polls = artifact.spend
    seconds = [p.elapsed_seconds for p in polls]
    charged = [float(p.tokens_charged) for p in polls]
    pace = [p.world_cap_tokens * p.elapsed_seconds / HOUR_SECONDS for p in polls]
    caps = [float(p.world_cap_tokens) for p in polls]
    series = [("tokens charged (ledger)", seconds, charged, False)]
    shown = max([*charged, *pace, 1.0])
    on_scale = bool(caps) and max(caps) <= CAP_ON_SCALE * shown
    if on_scale:
        series.append(("world cap per window", seconds, caps, True))
    series.append(("cap per hour × elapsed hours", seconds, pace, True))
    chart = lines(
        "Tokens the gateway's ledger charged this run, over real time, against the world cap",
        series,
        ("real seconds since the first tick", "tokens"),
    )
    bill = artifact.bill
    off_scale = "" if on_scale else " (far above this chart's scale, so not drawn)"
    estimated = sum(artifact.tiers.estimated_tokens)
    return (
        f"<h2>Spend against the world cap</h2>{chart}"
        f'<p class="muted">Tokens charged: {bill.consumed_tokens:,} ({_money(bill.consumed_micro_usd)}) '
        f"by the gateway's ledger, read {len(polls):,} times over {_last(polls):.1f} s. The gateway holds "
        f"the world cap of {bill.world_cap_tokens:,} tokens per ledger window (an hour){off_scale}; the "
        "orange dashed line is that cap's hourly pace over this run's real duration. "
        f"{bill.blocked_by_world_cap:,} calls were held back by the cap. The kernel estimated "
        f"{estimated:,} tokens for the calls it issued: an estimate, not a charge.</p>"
    )


def _last(polls: list[SpendPoll]) -> float:
    return polls[-1].elapsed_seconds if polls else 0.0


def _money(micro_usd: int) -> str:
    return f"${micro_usd / 1e6:,.4f}"


def outcomes_line(artifact: RunArtifact) -> str:
    o, bill = artifact.outcomes, artifact.bill
    failed = f" ({escape(classes(o.failed_by_class))})" if o.failed else ""
    reasons = f" ({escape(classes(o.fallback_reasons))})" if o.fallbacks else ""
    deferred = f", {o.deferred:,} deferred by their providers' rate limits" if o.deferred else ""
    return (
        f'<p class="muted">{figures_line(artifact)}. Of the model calls run: {o.answered_by_model:,} '
        f"answered by a model, {o.answered_offline:,} by the offline adapter, {o.failed:,} failed{failed}, "
        f"{o.stopped:,} stopped in flight{deferred}; {o.fallbacks:,} runs reached the world as cognition's "
        f"fallback{reasons}. The ledger refused or ended {bill.killed:,} calls under a control "
        f"({bill.killed_in_flight:,} of them in flight).</p>"
    )


def controls_section(artifact: RunArtifact) -> str:
    if not artifact.controls:
        return ""
    cards = "".join(f'<div class="card">{escape(describe_control(c))}</div>' for c in artifact.controls)
    return f'<h2 id="controls">Controls that stopped this run\'s calls</h2>{cards}'


def _call_tick(tick: int | None, merged: int | None) -> int | None:
    return tick if tick is not None else merged


def _shared(artifact: RunArtifact, at_tick: int) -> list[int]:
    """calls issued, model calls run, answered by a model, offline, failed, for calls issued at or after
    `at_tick` (a call's issuing tick, else the tick its result came back; a call naming neither counts
    for a run that began at or after `at_tick`)."""
    ticks = artifact.tiers.ticks
    issued = sum(n for t, n in zip(ticks, artifact.tiers.calls_issued, strict=True) if t >= at_tick)
    own = bool(ticks) and ticks[0] >= at_tick
    calls = []
    for c in artifact.calls:
        tick = _call_tick(c.issued_at_tick, c.merged_at_tick)
        if (tick is None and own) or (tick is not None and tick >= at_tick):
            calls.append(c)
    return [
        issued,
        len(calls),
        sum(c.outcome == "model" for c in calls),
        sum(c.outcome == "offline" for c in calls),
        sum(c.outcome == "failed" for c in calls),
    ]


def _charged_from(artifact: RunArtifact, at_tick: int) -> tuple[int, int] | None:
    """(tokens, micro-USD) the ledger charged from `at_tick` on, interpolated between its polls."""
    polls = artifact.spend
    first = artifact.tiers.ticks[0] if artifact.tiers.ticks else 0
    if len(polls) < 2:
        return None
    at = at_tick - first

    def level(pick: str) -> float:
        before = max((p for p in polls if p.tick <= at), key=lambda p: p.tick, default=polls[0])
        after = min((p for p in polls if p.tick >= at), key=lambda p: p.tick, default=polls[-1])
        a, b = getattr(before, pick), getattr(after, pick)
        span = after.tick - before.tick
        return float(a) if span <= 0 else a + (b - a) * (at - before.tick) / span

    last = polls[-1]
    return (
        round(last.tokens_charged - level("tokens_charged")),
        round(last.micro_usd_charged - level("micro_usd_charged")),
    )


def _row(name: str, cells: list[str]) -> str:
    return f"<tr><th>{escape(name)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def fork_bill(artifact: RunArtifact, parent: RunArtifact, at: int) -> list[tuple[str, str, str, str]]:
    """The fork's bill beside its parent's, row by row: (figure, parent's whole run, parent over the
    ticks the fork shares, fork). One computation for the report and the terminal."""
    whole = _shared(parent, 0)
    parent_shared, fork_shared = _shared(parent, at), _shared(artifact, at)
    names = ["calls issued", "model calls run", "answered by a model", "answered offline", "failed"]
    rows = [
        (n, f"{w:,}", f"{p:,}", f"{f:,}")
        for n, w, p, f in zip(names, whole, parent_shared, fork_shared, strict=True)
    ]
    charged = _charged_from(parent, at)
    rows.append(
        (
            "tokens charged",
            f"{parent.bill.consumed_tokens:,}",
            f"{charged[0]:,} (from the ledger's polls)" if charged else "not polled",
            f"{artifact.bill.consumed_tokens:,}",
        )
    )
    rows.append(
        (
            "cost charged",
            _money(parent.bill.consumed_micro_usd),
            _money(charged[1]) if charged else "not polled",
            _money(artifact.bill.consumed_micro_usd),
        )
    )
    rows += [
        (
            "world cap (tokens per hour)",
            f"{parent.bill.world_cap_tokens:,}",
            "",
            f"{artifact.bill.world_cap_tokens:,}",
        ),
        (
            "held back by the cap",
            f"{parent.bill.blocked_by_world_cap:,}",
            "",
            f"{artifact.bill.blocked_by_world_cap:,}",
        ),
        ("refused or ended by a control", f"{parent.bill.killed:,}", "", f"{artifact.bill.killed:,}"),
    ]
    return rows


def fork_table(artifact: RunArtifact, parent: RunArtifact, at: int) -> str:
    """The same bill as text, for the terminal."""
    end = artifact.tiers.ticks[-1] if artifact.tiers.ticks else at
    header = ("", "parent, whole run", f"parent, {at}-{end}", f"fork, {at}-{end}")
    rows = [header, *fork_bill(artifact, parent, at)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{row[0]:<{widths[0]}}  " + "  ".join(f"{cell:>{widths[i]}}" for i, cell in enumerate(row) if i)
        for row in rows
    ]
    return "\n".join([f"bills for ticks {at}..{end}", *lines])


def fork_section(artifact: RunArtifact, parent: RunArtifact | None) -> str:
    """A fork's bill beside its parent's: the parent's whole run, the parent over the ticks the fork
    shares, and the fork; every figure defined as in the rest of the report."""
    if not artifact.forked_from:
        return ""
    parent_id = escape(str(artifact.forked_from.get("run_id", "")))
    at = int(str(artifact.forked_from.get("at_tick", 0)))
    head = f'<h2 id="fork">A fork of run <code>{parent_id}</code> from tick {at:,}</h2>'
    if parent is None:
        return (
            head + "<p class=\"muted\">The parent's artifact is not beside this run's folder, so its bill is "
            "not shown.</p>"
        )
    end = artifact.tiers.ticks[-1] if artifact.tiers.ticks else at
    rows = [_row(name, [escape(c) for c in cells]) for name, *cells in fork_bill(artifact, parent, at)]
    parent_end = parent.tiers.ticks[-1] if parent.tiers.ticks else 0
    columns = (
        f"<tr><th></th><th>parent, whole run (ticks 0–{parent_end:,})</th>"
        f"<th>parent, ticks {at:,}–{end:,}</th><th>fork, ticks {at:,}–{end:,}</th></tr>"
    )
    return (
        head
        + f'<table class="bill">{columns}{"".join(rows)}</table>'
        + '<p class="muted">Calls count on the tick the kernel issued them; tokens charged are the '
        "gateway ledger's, for the parent over the shared ticks the difference between its polls at the "
        "fork tick (interpolated) and its last.</p>"
    )
