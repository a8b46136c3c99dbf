"""The console's web layer in process (no gateway needed for what is refused before any call): cookies
are HttpOnly and SameSite=Strict, signing in rotates the session, and a form without its session's CSRF
token, from another origin, or a viewer's control, is refused with 403 before anything is sent."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from console.app import Console, build_app
from console.clients import ConsoleClients
from console.config import ConsoleConfig
from console.sessions import COOKIE_NAME, ViewerTokens
from console.watch import Watch
from services.settings import ChassisSettings

VIEWER_TOKEN = "a-viewer-token-long-enough"
BASE = "http://console.test"
KILL = {"kind": "control", "action": "kill", "scope": "tier", "target": "clotho", "reason": "test"}


@dataclass
class Browser:
    client: httpx.AsyncClient
    transport: httpx.ASGITransport

    async def csrf(self, path: str = "/signin") -> str:
        page = await self.client.get(path)
        match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert match is not None
        return match.group(1)

    async def sign_in_as_viewer(self) -> None:
        csrf = await self.csrf()
        answer = await self.client.post(
            "/signin", data={"csrf_token": csrf, "name": "someone", "token": VIEWER_TOKEN}
        )
        assert answer.status_code == 303


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    config = ConsoleConfig()
    # Nothing listens there: every request below is answered before the console would call a service.
    clients = ConsoleClients.dial("127.0.0.1:9", "127.0.0.1:9", ChassisSettings(), "a-reader-token-of-length")
    console = Console(clients, config, ViewerTokens({"vera": VIEWER_TOKEN}), Watch(clients, config))
    transport = httpx.ASGITransport(app=build_app(console))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield Browser(client, transport)
    await clients.close()


async def test_the_session_cookie_is_http_only_and_same_site_strict(browser: Browser) -> None:
    page = await browser.client.get("/signin")
    assert page.status_code == 200
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=")
    assert {"HttpOnly", "Path=/", "SameSite=strict"} <= {part.strip() for part in cookie.split(";")}
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


async def test_signing_in_gives_a_new_session_and_the_old_id_opens_nothing(browser: Browser) -> None:
    await browser.csrf()
    anonymous = browser.client.cookies[COOKIE_NAME]
    await browser.sign_in_as_viewer()
    signed = browser.client.cookies[COOKIE_NAME]
    assert signed != anonymous
    async with httpx.AsyncClient(
        transport=browser.transport, base_url=BASE, cookies={COOKIE_NAME: anonymous}
    ) as planted:
        replayed = await planted.post("/controls/review", data=KILL)
    assert (replayed.status_code, replayed.headers["location"]) == (303, "/signin")


async def test_a_sign_in_without_its_csrf_token_is_refused(browser: Browser) -> None:
    await browser.csrf()
    answer = await browser.client.post("/signin", data={"name": "someone", "token": VIEWER_TOKEN})
    assert answer.status_code == 403
    assert "CSRF token is missing or wrong" in answer.text


@pytest.mark.parametrize("path", ["/controls/review", "/controls/apply", "/signout"])
async def test_a_form_without_the_sessions_csrf_token_or_from_another_origin_is_refused(
    browser: Browser, path: str
) -> None:
    await browser.sign_in_as_viewer()
    csrf = await browser.csrf("/signin")
    for form in (KILL, {**KILL, "csrf_token": "another-sessions-token"}):
        answer = await browser.client.post(path, data=form)
        assert answer.status_code == 403
        assert "CSRF token is missing or wrong" in answer.text
    elsewhere = await browser.client.post(
        path, data={**KILL, "csrf_token": csrf}, headers={"Origin": "http://evil.example"}
    )
    assert elsewhere.status_code == 403
    assert "the form came from another origin" in elsewhere.text


@pytest.mark.parametrize("path", ["/controls/review", "/controls/apply"])
async def test_a_viewer_with_a_good_form_is_still_refused_the_control(browser: Browser, path: str) -> None:
    await browser.sign_in_as_viewer()
    csrf = await browser.csrf("/signin")
    answer = await browser.client.post(path, data={**KILL, "csrf_token": csrf}, headers={"Origin": BASE})
    assert answer.status_code == 403
    assert "vera is a viewer: viewers see everything and control nothing" in answer.text
