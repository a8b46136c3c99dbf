"""The page shell every console page shares (navigation, who is signed in, the offline notice) and the
formatting the pages share. Every value from the services is escaped here or by the caller: a world's
or an Ori's text is data, never markup."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from console.sessions import CSRF_FIELD, Session

NAV = (("/", "Worlds"), ("/controls", "Controls"), ("/audit", "Audit"))
OFFLINE_NOTICE = (
    '<p class="offline-notice" id="offline-notice"{hidden}>OFFLINE: replies marked '
    '<span class="badge offline">offline</span> come from the gateway\'s deterministic offline adapter, '
    "not a model.</p>"
)


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def url_part(value: str) -> str:
    return quote(value, safe="")


def tokens(n: int) -> str:
    return f"{n:,}"


def usd(value: float) -> str:
    return f"${value:,.4f}"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], *, body_id: str = "") -> str:
    """A table; each cell is markup the caller has already escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    tbody = f'<tbody id="{esc(body_id)}">' if body_id else "<tbody>"
    return f"<table><thead><tr>{head}</tr></thead>{tbody}{body}</tbody></table>"


def hidden(fields: Mapping[str, str]) -> str:
    return "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items())


def form(
    action: str, session: Session, inner: str, *, button: str, css: str = "", disabled: bool = False
) -> str:
    """A POST form carrying the session's CSRF token; `disabled` greys it out (a viewer's)."""
    fields = f"<fieldset disabled>{inner}</fieldset>" if disabled else inner
    return (
        f'<form method="post" action="{esc(action)}" class="{esc(css)}">'
        f"{hidden({CSRF_FIELD: session.csrf_token})}{fields}"
        f'<button type="submit"{" disabled" if disabled else ""}>{esc(button)}</button></form>'
    )


def json_data(element_id: str, data: Any) -> str:
    """Data for the page's script, inert (CSP forbids inline script; this is not executed)."""
    text = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'


def page(
    title: str,
    body: str,
    session: Session | None,
    *,
    stream: str = "",
    page_kind: str = "",
    offline: bool = False,
    offline_hidden: bool = False,
) -> str:
    """A whole HTML page. `stream` is the server-sent events URL the page's script follows. The offline
    notice shows when the page shows offline output (`offline`), or is there hidden for the script to
    show when offline output streams in (`offline_hidden`)."""
    user = session.user if session else None
    if user is not None and session is not None:
        nav = "".join(f'<a href="{esc(href)}">{esc(label)}</a>' for href, label in NAV)
        who = (
            f'<span class="who">{esc(user.name)} <span class="badge role-{esc(user.role.value)}">'
            f"{esc(user.role.value)}</span></span>"
            + form("/signout", session, "", button="Sign out", css="inline")
        )
    else:
        nav, who = "", ""
    notice = OFFLINE_NOTICE.format(hidden="") if offline else ""
    if offline_hidden and not offline:
        notice = OFFLINE_NOTICE.format(hidden=" hidden")
    data = f' data-stream="{esc(stream)}" data-page="{esc(page_kind)}"' if stream else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · Egbe console</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        f"<body{data}><header><strong>Egbe</strong><nav>{nav}</nav>{who}</header>"
        f'<main><h1>{esc(title)}</h1><p id="status" class="status"></p>'
        f"{notice}{body}</main></body></html>"
    )
