"""report.html: a self-contained page a producer reads, rendered from a run artifact alone."""

from __future__ import annotations

from collections import Counter
from html import escape
from itertools import accumulate
from pathlib import Path

from world.artifact import RunArtifact
from world.charts import grouped_bars, line_against_cap, stacked_area
from world.report_story import conversations_section, lives_section, moments_section

TIERS = ("clotho", "lachesis", "atropos")
# Counts drawn charts once laid out, so a headless browser (and a reader's devtools) can tell they rendered.
_VERIFY = """
<script>
window.addEventListener("load", () => {
  const charts = [...document.querySelectorAll("svg.chart")];
  const drawn = charts.filter(svg => {
    const box = svg.getBoundingClientRect();
    const marks = svg.querySelectorAll(".mark");
    return box.width > 0 && box.height > 0 && marks.length > 0 &&
      [...marks].some(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; });
  });
  document.body.dataset.chartsExpected = String(charts.length);
  document.body.dataset.chartsRendered = String(drawn.length);
});
</script>
"""
_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:24px auto;max-width:860px;color:#212529}
.banner{padding:10px 14px;border-radius:6px;font-weight:600}
.offline{background:#fff3bf;border:1px solid #f08c00}.model{background:#d3f9d8;border:1px solid #2b8a3e}
figure{margin:18px 0}figcaption{font-weight:600;margin-bottom:4px}
.big{font-size:28px;font-weight:700}.muted{color:#6c757d;font-size:13px}
.card{border:1px solid #dee2e6;border-radius:6px;padding:10px 14px;margin:10px 0}
.ok{color:#2b8a3e;font-weight:700}.bad{color:#c92a2a;font-weight:700}
blockquote{margin:4px 0 4px 12px;color:#495057;font-style:italic}
blockquote.reply{font-style:normal;color:#212529}ol.timeline{margin:6px 0;padding-left:20px;font-size:14px}
"""


def _offline_line(artifact: RunArtifact) -> str:
    if artifact.answered_by == "offline":
        return (
            '<p class="banner offline">OFFLINE: no ANTHROPIC_API_KEY was set, so the offline deterministic '
            "adapter answered every cognition call. Nothing in this report came from a language model.</p>"
        )
    return '<p class="banner model">MODEL: cognition calls were answered by Claude through the gateway.</p>'


def _money(micro_usd: int) -> str:
    return f"${micro_usd / 1e6:,.4f}"


def _relevance(artifact: RunArtifact) -> str:
    bill = artifact.bill
    ratio = bill.relevance_ratio
    times = (1 / ratio) if ratio else float("inf")
    chart = grouped_bars(
        "Cognition calls: this run against an every-agent-every-tick design",
        [("calls", [("issued", float(bill.calls_issued)), ("naive", float(bill.naive_calls))])],
        "calls",
    )
    return (
        "<h2>Cost scales with relevance, not with agent count</h2>"
        f'<p><span class="big">{ratio:.2%}</span> of the calls a naive design would make '
        f"({bill.calls_issued:,} issued against {bill.naive_calls:,}: {times:,.0f}x fewer). "
        f"Naive cost at this run's mean call cost: {_money(bill.naive_micro_usd)} and "
        f"{bill.naive_tokens:,} tokens; this run's ledger: {_money(bill.consumed_micro_usd)} and "
        f"{bill.consumed_tokens:,} tokens.</p>{chart}"
    )


def _tiers(artifact: RunArtifact) -> str:
    t = artifact.tiers
    return stacked_area(
        "Ori per cognition tier, tick by tick",
        t.ticks,
        [("clotho", t.clotho), ("lachesis", t.lachesis), ("atropos", t.atropos)],
        "tick (20 per game-second)",
    )


def _spend(artifact: RunArtifact) -> str:
    t = artifact.tiers
    issued = list(accumulate(t.estimated_tokens))
    chart = line_against_cap(
        "Tokens the kernel asked for (cumulative) against the world cap",
        t.ticks,
        [("estimated tokens", issued)],
        float(artifact.bill.world_cap_tokens),
        "tick",
    )
    bill = artifact.bill
    return (
        f"<h2>Spend against the world cap</h2>{chart}"
        f'<p class="muted">Gateway ledger: {bill.consumed_tokens:,} tokens consumed of a '
        f"{bill.world_cap_tokens:,}-token cap; {bill.blocked_by_world_cap:,} calls held back by the cap.</p>"
    )


def _calls_by_cause(artifact: RunArtifact) -> str:
    causes = sorted({g.cause for g in artifact.issued})
    counts: dict[tuple[str, str], int] = {(g.cause, g.tier): g.calls for g in artifact.issued}
    groups = [
        (cause.replace("_", " "), [(tier, float(counts.get((cause, tier), 0))) for tier in TIERS])
        for cause in causes
    ]
    answered = Counter(c.answered_by for c in artifact.calls)
    detail = ", ".join(
        f"{n:,} by the {who} adapter" if who == "offline" else f"{n:,} by a model"
        for who, n in sorted(answered.items())
    )
    return (
        "<h2>Calls by cause and tier</h2>"
        + grouped_bars(
            "Cognition calls the kernel issued, by cause, per tier", groups or [("none", [])], "calls"
        )
        + f'<p class="muted">{artifact.bill.calls_issued:,} calls issued; the gateway ran '
        f"{len(artifact.calls):,} model calls ({escape(detail or 'none')}) and stopped "
        f"{artifact.bill.killed:,} under a kill switch ({artifact.bill.killed_in_flight:,} of them in "
        "flight).</p>"
    )


def _saturation(artifact: RunArtifact) -> str:
    s = artifact.saturation
    if s is None:
        return ""
    groups = [
        (b.tier, [("allowed", float(b.allowed_tokens)), ("deferred", float(b.deferred_tokens))])
        for b in s.tiers
    ]
    held = '<span class="ok">held</span>' if s.world_cap_held else '<span class="bad">broken</span>'
    return (
        "<h2>A game-hour of this population against the world cap</h2>"
        + grouped_bars("Tokens per tier for one game-hour: allowed and deferred", groups, "tokens")
        + f"<p>Allowed {s.total_allowed_tokens:,} of a {s.world_cap_tokens:,}-token cap; "
        f"{s.total_deferred_tokens:,} tokens deferred. The cap {held}.</p>"
    )


def _directives(artifact: RunArtifact) -> str:
    if not artifact.directives:
        return ""
    allowed = sum(1 for d in artifact.directives if d.allowed)
    refused = [d for d in artifact.directives if not d.allowed]
    chart = grouped_bars(
        "Steward directives: allowed and refused",
        [("directives", [("allowed", float(allowed)), ("refused", float(len(refused)))])],
        "directives",
    )
    cards = ""
    for d in refused:
        laundered = f" (reclassified as {d.classified_kind.replace('_', ' ')})" if d.reclassified else ""
        cards += (
            f'<div class="card"><span class="bad">refused</span> tick {d.at_tick}: {escape(d.steward)} asked '
            f"{escape(d.ori_id)} to <i>{escape(d.kind.replace('_', ' '))}</i>{escape(laundered)}"
            f"<blockquote>{escape(d.text)}</blockquote>"
            f'<span class="muted">answer: {escape(d.answer)} under {escape(d.policy_ref)}</span></div>'
        )
    return f"<h2>A steward guides; it never owns</h2>{chart}{cards}"


def _kills(artifact: RunArtifact) -> str:
    if not artifact.kills:
        return ""
    cards = ""
    for k in artifact.kills:
        what = escape(f"{k.kind.replace('_', ' ')} {k.target}")
        head = f"<b>{what}</b> at tick {k.at_tick}: {escape(k.reason)}"
        if not k.applied:
            cards += (
                f'<div class="card">{head}<br><span class="bad">not thrown</span>: {escape(k.detail)}</div>'
            )
            continue
        cards += (
            f'<div class="card">{head}<br>After it: {k.calls_issued_after} calls issued, '
            f"{k.calls_run_after} run by a model or the offline adapter; "
            f"the Ori still acted on {k.actions_after} ticks (its behaviour tree).</div>"
        )
    return f"<h2>Kill switches and their effect</h2>{cards}"


def _replay(artifact: RunArtifact) -> str:
    r = artifact.replay
    if not r.checked:
        verdict = '<span class="muted">not checked for this run</span>'
    elif r.matches:
        verdict = (
            f'<span class="ok">matches</span>: {r.ticks_compared:,} ticks replayed through a fresh kernel'
        )
    else:
        verdict = (
            f'<span class="bad">diverges</span> at <code>{escape(r.divergence)}</code>: recorded '
            f"<code>{escape(r.recorded)}</code>, replayed <code>{escape(r.fresh)}</code>"
        )
    return f"<h2>Replay check</h2><p>{verdict}</p>"


def render_report(artifact: RunArtifact) -> str:
    fingerprints = (
        ", ".join(f"{f.scope} {f.fnv1a64}" for f in artifact.config_fingerprints) or "none reported"
    )
    fork = ""
    if artifact.forked_from:
        parent = escape(str(artifact.forked_from.get("run_id", "")))
        fork = (
            f"<p>Forked from run <code>{parent}</code> at tick {artifact.forked_from.get('at_tick', '')}.</p>"
        )
    body = (
        _offline_line(artifact)
        + f"<h1>{escape(artifact.scenario.title)}</h1>"
        + f'<p class="muted">run {escape(artifact.run_id)} · scenario {escape(artifact.scenario.name)} '
        f"(fingerprint {artifact.scenario.fingerprint}) · seed {artifact.seed} · {artifact.ticks_run:,} ticks"
        f"{' (reduced time)' if artifact.reduced_time else ''} · "
        f"{artifact.population.get('total', 0):,} Ori · "
        f"config {escape(fingerprints)} · {artifact.wall_seconds:.1f} s wall</p>"
        + fork
        + _relevance(artifact)
        + "<h2>Who thought how much</h2>"
        + _tiers(artifact)
        + _spend(artifact)
        + _calls_by_cause(artifact)
        + _saturation(artifact)
        + conversations_section(artifact)
        + moments_section(artifact)
        + lives_section(artifact)
        + _directives(artifact)
        + _kills(artifact)
        + _replay(artifact)
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Egbe run {escape(artifact.run_id)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}{_VERIFY}</body></html>\n"
    )


def write_report(artifact: RunArtifact, path: Path) -> None:
    path.write_text(render_report(artifact))
