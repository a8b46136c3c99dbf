"""report.html: a self-contained page a producer reads, rendered from a run artifact alone."""

from __future__ import annotations

from html import escape
from pathlib import Path

from world.artifact import ArtifactError, RunArtifact, read_artifact
from world.charts import grouped_bars, stacked_area
from world.report_bill import (
    banner,
    controls_section,
    figures_line,
    fork_section,
    outcomes_line,
    spend_section,
)
from world.report_story import conversations_section, lives_section, moments_section
from world.run_folder import ARTIFACT_FILE

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
.mixed{background:#ffe8cc;border:1px solid #e8590c}.failed{background:#ffe3e3;border:1px solid #c92a2a}
table.bill{border-collapse:collapse;font-size:14px}table.bill th,table.bill td{border:1px solid #dee2e6;
padding:4px 8px;text-align:right}table.bill th:first-child{text-align:left}
figure{margin:18px 0}figcaption{font-weight:600;margin-bottom:4px}
.big{font-size:28px;font-weight:700}.muted{color:#6c757d;font-size:13px}
.card{border:1px solid #dee2e6;border-radius:6px;padding:10px 14px;margin:10px 0}
.ok{color:#2b8a3e;font-weight:700}.bad{color:#c92a2a;font-weight:700}
blockquote{margin:4px 0 4px 12px;color:#495057;font-style:italic}
blockquote.reply{font-style:normal;color:#212529}ol.timeline{margin:6px 0;padding-left:20px;font-size:14px}
"""


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
        log=True,
    )
    return (
        "<h2>Cost scales with relevance, not with agent count</h2>"
        f'<p><span class="big">{ratio:.2%}</span> of the calls a naive design would make '
        f"({bill.calls_issued:,} issued against {bill.naive_calls:,}: {times:,.0f}x fewer). "
        f"Naive cost at this run's mean call cost: {_money(bill.naive_micro_usd)} and "
        f"{bill.naive_tokens:,} tokens (kernel estimates); tokens charged by this run's ledger: "
        f"{bill.consumed_tokens:,} ({_money(bill.consumed_micro_usd)}).</p>{chart}"
    )


def _tiers(artifact: RunArtifact) -> str:
    t = artifact.tiers
    return stacked_area(
        "Ori per cognition tier, tick by tick",
        t.ticks,
        [("clotho", t.clotho), ("lachesis", t.lachesis), ("atropos", t.atropos)],
        "tick (20 per game-second)",
    )


def _calls_by_cause(artifact: RunArtifact) -> str:
    causes = sorted({g.cause for g in artifact.issued})
    counts: dict[tuple[str, str], int] = {(g.cause, g.tier): g.calls for g in artifact.issued}
    groups = [
        (cause.replace("_", " "), [(tier, float(counts.get((cause, tier), 0))) for tier in TIERS])
        for cause in causes
    ]
    return (
        "<h2>Calls by cause and tier</h2>"
        + grouped_bars(
            "Cognition calls the kernel issued, by cause, per tier", groups or [("none", [])], "calls"
        )
        + outcomes_line(artifact)
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


def render_report(artifact: RunArtifact, parent: RunArtifact | None = None) -> str:
    """The page for `artifact`; a fork's page also shows `parent`'s bill beside its own."""
    fingerprints = (
        ", ".join(f"{f.scope} {f.fnv1a64}" for f in artifact.config_fingerprints) or "none reported"
    )
    body = (
        banner(artifact)
        + f"<h1>{escape(artifact.scenario.title)}</h1>"
        + f'<p class="muted">run {escape(artifact.run_id)} · scenario {escape(artifact.scenario.name)} '
        f"(fingerprint {artifact.scenario.fingerprint}) · seed {artifact.seed} · {artifact.ticks_run:,} ticks"
        f"{' (reduced time)' if artifact.reduced_time else ''} · "
        f"{artifact.population.get('total', 0):,} Ori · "
        f"config {escape(fingerprints)} · {artifact.wall_seconds:.1f} s wall</p>"
        + f"<p>{figures_line(artifact)}</p>"
        + fork_section(artifact, parent)
        + _relevance(artifact)
        + "<h2>Who thought how much</h2>"
        + _tiers(artifact)
        + spend_section(artifact)
        + _calls_by_cause(artifact)
        + _saturation(artifact)
        + conversations_section(artifact)
        + moments_section(artifact)
        + lives_section(artifact)
        + _directives(artifact)
        + _kills(artifact)
        + controls_section(artifact)
        + _replay(artifact)
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Egbe run {escape(artifact.run_id)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}{_VERIFY}</body></html>\n"
    )


def write_report(artifact: RunArtifact, path: Path) -> None:
    """Writes report.html; a fork's report reads its parent's artifact from the parent's run folder
    beside its own, when it is there."""
    parent = None
    if artifact.forked_from:
        parent_dir = path.parent.parent / str(artifact.forked_from.get("run_id", ""))
        try:
            parent = read_artifact(parent_dir / ARTIFACT_FILE)
        except ArtifactError:
            parent = None
    path.write_text(render_report(artifact, parent))
