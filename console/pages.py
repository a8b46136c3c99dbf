"""The watching pages: every world, one world, one Ori. The live parts (the worlds table, a world's
figures, charts and call stream) are drawn by `static/console.js` from the server-sent events; an Ori's
page is whole on the server."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from console.layout import esc, form, hidden, json_data, page, table, tokens, url_part, usd
from console.sessions import Session
from egbe.v1 import biography_pb2, gateway_pb2
from services.vocabulary import TIER_NAMES

PAYLOAD_CHARS = 4_000  # an event's payload shown before "…"


def worlds_page(session: Session, summaries: list[dict[str, Any]]) -> str:
    headers = (
        "World",
        "Spend / cap (tokens)",
        "Spend / cap (USD)",
        "Calls",
        "Calls/s",
        "Calls by tier",
        "Refused",
        "Deferred",
        "Active controls",
    )
    body = (
        "<p>Every world the gateway's ledger knows, this ledger window; live.</p>"
        + table(headers, [], body_id="worlds-body")
        + json_data("initial", {"worlds": summaries})
    )
    return page("Worlds", body, session, stream="/events/worlds", page_kind="worlds")


def world_page(
    session: Session, world_id: str, summary: dict[str, Any] | None, history: list[dict[str, Any]]
) -> str:
    figures = "".join(
        f'<div class="figure"><span class="label">{esc(label)}</span>'
        f'<span class="value" data-field="{esc(name)}"></span></div>'
        for name, label in (
            ("spend_tokens", "Spend / cap (tokens)"),
            ("spend_usd", "Spend / cap (USD)"),
            ("calls", "Calls"),
            ("calls_per_s", "Calls/s"),
            ("tiers", "Calls by tier"),
            ("killed", "Refused"),
            ("blocked", "Deferred"),
            ("controls", "Active controls"),
        )
    )
    stream_headers = ("Time", "Ori", "Cause", "Tier", "Outcome", "Latency", "Cost", "Source", "Said / detail")
    body = (
        f'<p><a href="/controls?world_id={url_part(world_id)}">Controls for this world</a> · '
        f'<a href="/audit?world_id={url_part(world_id)}">Audit</a></p>'
        f'<section class="figures">{figures}</section>'
        '<section class="charts"><figure><figcaption>Calls by tier over time</figcaption>'
        '<svg id="tiers-chart" viewBox="0 0 600 160" role="img" aria-label="calls by tier"></svg></figure>'
        "<figure><figcaption>Spend over time against the cap (tokens)</figcaption>"
        '<svg id="spend-chart" viewBox="0 0 600 160" role="img" aria-label="spend against cap"></svg>'
        "</figure></section>"
        '<h2>What the Ori said</h2><ol id="speech-body" class="speech"></ol>'
        "<h2>Cognition calls, newest first</h2>"
        + table(stream_headers, [], body_id="stream-body")
        + json_data("initial", {"world": summary, "history": history, "world_id": world_id})
    )
    return page(
        f"World {world_id}",
        body,
        session,
        stream=f"/events/worlds/{url_part(world_id)}",
        page_kind="world",
        offline_hidden=True,
    )


def _identity(identity: biography_pb2.RehydrateResponse) -> str:
    if not identity.HasField("identity"):
        return "<p>No identity is registered for this Ori.</p>"
    who = identity.identity
    rows = [
        ("Name", who.display_name),
        ("Vocation", who.vocation),
        ("Home", who.home),
        ("Locale", who.locale or "en-US"),
        ("Minor", "yes" if who.minor else "no"),
        ("Personality", ", ".join(f"{t.axis} {t.level_bp / 100:.0f}%" for t in who.personality)),
        ("Values", ", ".join(f"{v.value_ref} {v.weight_bp / 100:.0f}%" for v in who.values)),
        ("Quirks", "; ".join(who.quirks)),
        (
            "Relationships",
            "; ".join(f"{r.other_name} ({r.kind}, {r.affinity_bp / 100:+.0f}%)" for r in who.relationships),
        ),
        ("Identity version", str(identity.identity_version)),
    ]
    listing = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f'<dl class="identity">{listing}</dl><blockquote class="persona">{esc(who.persona)}</blockquote>'


def _payload(message: Any) -> str:
    text = json.dumps(json_format.MessageToDict(message), indent=2, ensure_ascii=False)
    return text if len(text) <= PAYLOAD_CHARS else text[:PAYLOAD_CHARS] + "\n…"


def _timeline(events: list[biography_pb2.OriEvent]) -> str:
    rows = [
        (
            esc(event.stream_version),
            esc(biography_pb2.OriEventKind.Name(event.kind).removeprefix("ORI_EVENT_KIND_").lower()),
            esc(event.world_tick),
            esc(event.recorded_at.ToJsonString()),
            f"<details><summary>payload</summary><pre>{esc(_payload(event.payload))}</pre></details>",
        )
        for event in events
    ]
    return table(("Version", "Event", "World tick", "Recorded", "Payload"), rows)


def call_details(record: gateway_pb2.AuditRecord) -> str:
    """One audited call: its figures, the full context sent, the reply, the policy decision, the cost."""
    source = (
        '<span class="badge offline">offline</span>'
        if record.offline
        else '<span class="badge model">model</span>'
    )
    context = json.dumps(json_format.MessageToDict(record.input_context), indent=2, ensure_ascii=False)
    summary = (
        f"{esc(record.recorded_at.ToJsonString())} · {esc(record.cause)} · "
        f"{esc(TIER_NAMES.get(record.tier, '?'))} · {esc(record.error_class or 'answered')} · "
        f"{record.model_latency_us / 1000:.1f} ms · {usd(record.cost.micro_usd / 1e6)} · {source}"
    )
    facts = [
        ("Run", record.run_id),
        ("Kernel call", record.kernel_call_id),
        ("Model", f"{record.model_ref} ({record.model_class})"),
        ("Policy decision", record.policy_decision),
        (
            "Tokens",
            f"in {tokens(record.usage.input_tokens)}, out {tokens(record.usage.output_tokens)}, "
            f"cache read {tokens(record.usage.cache_read_tokens)}",
        ),
        ("Cost", f"{usd(record.cost.micro_usd / 1e6)}{' (estimated)' if record.cost.estimated else ''}"),
        ("Config fingerprint", record.config_fingerprint.fnv1a64),
    ]
    listing = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    return (
        f'<details class="call" data-call="{esc(record.call_id)}"><summary>{summary}</summary>'
        f'<dl>{listing}</dl><h4>Context sent</h4><pre class="context">{esc(context)}</pre>'
        f"<h4>Reply{' (offline)' if record.offline else ''}</h4>"
        f'<pre class="reply">{esc(record.output or "(none)")}</pre></details>'
    )


def ori_page(
    session: Session,
    *,
    world_id: str,
    ori_id: str,
    identity: biography_pb2.RehydrateResponse,
    events: biography_pb2.ReadResponse,
    calls: list[gateway_pb2.AuditRecord],
    calls_next: str,
) -> str:
    here = f"/worlds/{url_part(world_id)}/ori/{url_part(ori_id)}"
    user = session.user
    may = user is not None and user.may_control
    control = form(
        "/controls/review",
        session,
        hidden({"kind": "control", "scope": "ori", "target": ori_id, "world_id": world_id})
        + '<label>Action <select name="action"><option>kill</option><option>pause</option>'
        "<option>quarantine</option><option>resume</option></select></label>"
        '<label>Reason <input name="reason" required maxlength="500"></label>',
        button="Review…",
        css="control",
        disabled=not may,
    )
    more_events = (
        f'<p><a href="{here}?events={url_part(events.next_page_token)}">Later events →</a></p>'
        if events.next_page_token
        else ""
    )
    more_calls = (
        f'<p><a href="{here}?calls={url_part(calls_next)}">Later calls →</a></p>' if calls_next else ""
    )
    body = (
        f'<p><a href="/worlds/{url_part(world_id)}">← world {esc(world_id)}</a></p>'
        f"<h2>Control this Ori in {esc(world_id)}</h2>{control}"
        + ("" if may else '<p class="note">Viewers see; only operators control.</p>')
        + f"<h2>Identity</h2>{_identity(identity)}"
        + "<h2>Biography, in order</h2>"
        + _timeline(list(events.events))
        + more_events
        + f"<h2>Cognition calls in {esc(world_id)}, oldest first</h2>"
        + ("".join(call_details(r) for r in calls) or "<p>No audited call yet.</p>")
        + more_calls
    )
    return page(f"Ori {ori_id}", body, session, offline=any(r.offline for r in calls))
