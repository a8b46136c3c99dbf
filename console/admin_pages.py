"""The pages that are not live: signing in, the Controls page and its confirmation, and the Audit page."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from console.controls import ACTIONS, SCOPES, Order
from console.layout import esc, form, hidden, page, table, url_part
from console.pages import call_details
from console.sessions import Session
from egbe.v1 import gateway_pb2
from services.vocabulary import TIER_NAMES


def signin_page(session: Session, message: str = "") -> str:
    body = (
        (f'<p class="error">{esc(message)}</p>' if message else "")
        + "<p>Sign in with an operator token (checked by the gateway) or a viewer token (read-only).</p>"
        + form(
            "/signin",
            session,
            '<label>Your name <input name="name" required maxlength="64" autocomplete="username"></label>'
            '<label>Token <input name="token" type="password" required autocomplete="current-password">'
            "</label>",
            button="Sign in",
            css="signin",
        )
    )
    return page("Sign in", body, session)


def _options(values: tuple[str, ...] | list[str], chosen: str = "") -> str:
    return "".join(f"<option{' selected' if v == chosen else ''}>{esc(v)}</option>" for v in values)


def controls_page(
    session: Session, controls: list[gateway_pb2.Control], world_id: str, message: str = ""
) -> str:
    user = session.user
    may = user is not None and user.may_control
    rows = [
        (
            esc(gateway_pb2.ControlKind.Name(c.kind).removeprefix("CONTROL_KIND_").lower()),
            esc(gateway_pb2.ControlScope.Name(c.scope).removeprefix("CONTROL_SCOPE_").lower()),
            esc(c.target),
            esc(c.world_id or "every world"),
            esc(c.operator_id),
            esc(c.reason),
            esc(c.created_at.ToJsonString()),
            esc(c.expires_at.ToJsonString() if c.HasField("expires_at") else "never"),
            "active" if c.active else ("expired" if c.expired else "lifted"),
        )
        for c in controls
    ]
    control_form = form(
        "/controls/review",
        session,
        hidden({"kind": "control"})
        + f'<label>Action <select name="action">{_options(ACTIONS)}</select></label>'
        + f'<label>Scope <select name="scope">{_options(list(SCOPES))}</select></label>'
        + '<label>Target <input name="target" required maxlength="128" '
        'placeholder="an Ori id, clotho, a tenant or a world"></label>'
        + f'<label>Only in world <input name="world_id" maxlength="128" value="{esc(world_id)}"></label>'
        + '<label>For minutes <input name="expires_minutes" inputmode="numeric" placeholder="until resumed">'
        "</label>" + '<label>Reason <input name="reason" required maxlength="500"></label>',
        button="Review…",
        css="control",
        disabled=not may,
    )
    cap_form = form(
        "/controls/review",
        session,
        hidden({"kind": "cap"})
        + f'<label>World <input name="world_id" required maxlength="128" value="{esc(world_id)}"></label>'
        + '<label>Tokens per hour <input name="tokens_per_hour" required inputmode="numeric"></label>'
        + '<label>Reason <input name="reason" required maxlength="500"></label>',
        button="Review…",
        css="control",
        disabled=not may,
    )
    budget_form = form(
        "/controls/review",
        session,
        hidden({"kind": "budget"})
        + f'<label>Tier <select name="tier">{_options(list(TIER_NAMES.values()))}</select></label>'
        + '<label>Model calls <input name="max_model_calls" inputmode="numeric"></label>'
        + '<label>Tool calls <input name="max_tool_calls" inputmode="numeric"></label>'
        + '<label>Tokens <input name="max_tokens" inputmode="numeric"></label>'
        + '<label>Reason <input name="reason" required maxlength="500"></label>',
        button="Review…",
        css="control",
        disabled=not may,
    )
    body = (
        (f'<p class="result">{esc(message)}</p>' if message else "")
        + ("" if may else '<p class="note">Viewers see the controls; only operators change them.</p>')
        + "<h2>Kill, pause, quarantine or resume</h2>"
        + control_form
        + "<h2>A world's cap</h2>"
        + cap_form
        + "<h2>A tier's run budget</h2>"
        + budget_form
        + "<h2>Controls (newest last)</h2>"
        + table(("Kind", "Scope", "Target", "World", "By", "Reason", "Created", "Expires", "State"), rows)
    )
    return page("Controls", body, session)


def confirm_page(session: Session, order: Order) -> str:
    body = (
        '<p class="confirm">Confirm: <strong id="order">'
        + esc(order.describe())
        + "</strong></p><p>This goes to the gateway with your token and is audited as yours.</p>"
        + form("/controls/apply", session, hidden(order.fields()), button="Confirm", css="confirm")
        + '<p><a href="/controls">Cancel</a></p>'
    )
    return page("Confirm a control", body, session)


def result_page(session: Session, order: Order, outcome: str, ok: bool) -> str:
    css = "result" if ok else "error"
    body = (
        f'<p class="{css}" id="outcome">{esc(order.describe())} → {esc(outcome)}</p>'
        '<p><a href="/controls">Controls</a> · <a href="/">Worlds</a></p>'
    )
    return page("Control sent" if ok else "Control refused", body, session)


def message_page(session: Session | None, title: str, message: str) -> str:
    return page(title, f'<p class="error" id="outcome">{esc(message)}</p>', session)


AUDIT_FILTERS = ("world_id", "ori_id", "tier", "run_id", "kernel_call_id")
ATTEMPT_FILTERS = ("decision", "method", "operator_id")


def audit_page(
    session: Session,
    *,
    filters: Mapping[str, str],
    records: list[gateway_pb2.AuditRecord],
    records_next: str,
    attempts: list[gateway_pb2.OperatorAttempt],
    attempts_next: str,
) -> str:
    def field(name: str, label: str) -> str:
        if name == "tier":
            choices = _options(["", *TIER_NAMES.values()], filters.get("tier", ""))
            return f'<label>{label} <select name="tier">{choices}</select></label>'
        if name == "decision":
            choices = _options(["", "allowed", "refused"], filters.get("decision", ""))
            return f'<label>{label} <select name="decision">{choices}</select></label>'
        value = esc(filters.get(name, ""))
        return f'<label>{label} <input name="{name}" maxlength="256" value="{value}"></label>'

    def link(**changes: str) -> str:
        return "/audit?" + urlencode({**{k: v for k, v in filters.items() if v}, **changes})

    search = (
        '<form method="get" action="/audit" class="search">'
        + "".join(field(n, n.replace("_", " ")) for n in (*AUDIT_FILTERS, *ATTEMPT_FILTERS))
        + '<button type="submit">Search</button></form>'
    )
    export = "/audit/export.jsonl?" + urlencode({k: filters[k] for k in AUDIT_FILTERS if filters.get(k)})
    attempt_rows = [
        (
            esc(a.seq),
            esc(a.recorded_at.ToJsonString()),
            esc(a.method),
            esc(a.role),
            esc(a.operator_id),
            "allowed" if a.allowed else '<span class="refused">refused</span>',
            esc(a.detail),
        )
        for a in attempts
    ]
    world_link = "".join(
        f'<p>Calls of world <a href="/worlds/{url_part(w)}">{esc(w)}</a></p>'
        for w in [filters.get("world_id", "")]
        if w
    )
    body = (
        search
        + f'<p><a id="export" href="{esc(export)}">Export the matching audit records as JSONL</a></p>'
        + "<h2>Cognition-call audit records, oldest first</h2>"
        + world_link
        + ("".join(call_details(r) for r in records) or "<p>No record matches.</p>")
        + (f'<p><a href="{esc(link(records=records_next))}">More records →</a></p>' if records_next else "")
        + "<h2>Operator attempts, oldest first</h2>"
        + table(("Seq", "Recorded", "Method", "Role", "Operator", "Decision", "Detail"), attempt_rows)
        + (
            f'<p><a href="{esc(link(attempts=attempts_next))}">More attempts →</a></p>'
            if attempts_next
            else ""
        )
    )
    return page("Audit", body, session, offline=any(r.offline for r in records))
