"""The report's story sections: what the player said and what the Ori answered, what each crossroads
and irreversible action came to, and each featured Ori's life in tick order."""

from __future__ import annotations

from html import escape

from world.artifact import BiographySummary, ConversationRecord, MomentRecord, RunArtifact, TimelineEntry
from world.charts import timeline

SOURCE_LABEL = {
    "offline": "offline adapter",
    "model": "model",
    "template-fallback": "template fallback",
}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def conversation_summary(conversations: list[ConversationRecord]) -> str:
    """One line: how many of the player's lines were answered, and the median reply latency."""
    answered = [c for c in conversations if c.answered]
    line = f"{len(answered)} of {len(conversations)} answered"
    ticks = [float(c.latency_ticks) for c in answered if c.latency_ticks is not None]
    if ticks:
        line += f", reply p50 {percentile(ticks, 50):g} ticks"
    millis = [c.latency_ms for c in answered if c.latency_ms is not None]
    if millis:
        line += f", {percentile(millis, 50):.1f} ms"
    return line


def _conversation(c: ConversationRecord) -> str:
    said = (
        f'<p class="muted">tick {c.line_tick} · {escape(c.speaker_name)} to {escape(c.ori_name)}</p>'
        f'<blockquote class="line">{escape(c.line)}</blockquote>'
    )
    if not c.answered:
        unanswered = '<span class="bad">no reply</span> by the end of the run'
        return f'<div class="card conversation">{said}{unanswered}</div>'
    source = SOURCE_LABEL.get(c.source or "", "unlabelled")
    ms = f", {c.latency_ms:,.1f} ms" if c.latency_ms is not None else ""
    plan = ""
    if c.plan is not None:
        fits = "within" if c.plan.within_budget else "over"
        plan = f" · spoken-reply plan {fits} its {c.plan.end_to_end_budget_ms:,} ms budget"
    return (
        f'<div class="card conversation">{said}'
        f'<blockquote class="reply"><b>{escape(c.ori_name)}:</b> {escape(c.reply)}</blockquote>'
        f'<span class="muted">reply at tick {c.reply_tick}: {c.latency_ticks} ticks{ms} · '
        f"tier {escape(c.tier or 'unspecified')} · {escape(source)}{plan}</span></div>"
    )


def conversations_section(artifact: RunArtifact) -> str:
    if not artifact.conversations:
        return ""
    cards = "".join(_conversation(c) for c in artifact.conversations)
    return (
        '<h2 id="conversations">Conversations</h2>'
        f"<p>The player spoke {len(artifact.conversations)} times: "
        f"{escape(conversation_summary(artifact.conversations))}.</p>{cards}"
    )


def _moment(m: MomentRecord) -> str:
    what = "Crossroads" if m.kind == "crossroads" else "Irreversible action"
    head = (
        f"<b>{what}</b> for {escape(m.ori_name)}, ticks {m.first_tick}–{m.last_tick}"
        f"<blockquote>{escape(m.text)}</blockquote>"
    )
    if m.options:
        head += "<p>Options: " + " · ".join(f"<i>{escape(o)}</i>" for o in m.options) + "</p>"
    if not m.decisions:
        none = f"No cognition result reached the world for {escape(m.ori_name)} in this window."
        return f'<div class="card moment">{head}<p class="muted">{none}</p></div>'
    items = ""
    for d in m.decisions:
        chosen = f' <span class="ok">chose: {escape(d.chosen_option)}</span>' if d.chosen_option else ""
        why = f" <span class='muted'>because {escape(d.rationale)}</span>" if d.rationale else ""
        label = "offline" if d.offline else "model"
        items += f"<li>tick {d.tick} · {escape(d.mode)} ({label}): {escape(d.choice)}{chosen}{why}</li>"
    return f'<div class="card moment">{head}<ul>{items}</ul></div>'


def moments_section(artifact: RunArtifact) -> str:
    if not artifact.moments:
        return ""
    cards = "".join(_moment(m) for m in artifact.moments)
    return f'<h2 id="moments">What the crossroads and the irreversible actions came to</h2>{cards}'


def _life(b: BiographySummary) -> str:
    chain = {True: "hash chain intact", False: "hash chain BROKEN", None: "chain not checked"}[b.chain_ok]
    head = f'<b>{escape(b.name)}</b> <span class="muted">{b.events} events; {chain}</span>'
    if not b.timeline:
        none = "No biography events were recorded for this Ori in this run."
        return f'<div class="card">{head}<p>{none}</p></div>'
    items = "".join(f"<li>{escape(_entry(e))}</li>" for e in b.timeline)
    return f'<div class="card">{head}<ol class="timeline">{items}</ol></div>'


def _entry(e: TimelineEntry) -> str:
    return f"tick {e.tick} · {e.kind.replace('_', ' ')}" + (f": {e.text}" if e.text else "")


def lives_section(artifact: RunArtifact) -> str:
    """Each featured Ori's biography in tick order: who it is, what it remembered and reflected, whom
    it grew close to."""
    featured = [b for b in artifact.biographies if b.featured]
    if not featured:
        return ""
    rows = [(b.name, [(e.tick, _entry(e)) for e in b.timeline]) for b in featured]
    chart = timeline("Featured Ori: biography events over the run", artifact.ticks_run, rows)
    cards = "".join(_life(b) for b in featured)
    return f'<h2 id="lives">Featured lives, as their biographies tell them</h2>{chart}{cards}'
