"""The console in Debian's Chromium (Playwright, headless) against a real `egbe up` serving it, while a
demo world runs: an operator signs in and watches counters and calls change without a reload, reads a
call's context on an Ori's page, kills that Ori from the page and sees its next call refused in the
stream; a viewer is refused the control; a form without its CSRF token is refused. Each page is
photographed into the test's screenshot folder (printed at the end; EGBE_CONSOLE_SCREENSHOTS names
another)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from tests.conftest import ROOT, EmbeddedEgbe, chromium_path, start_embedded, stop_embedded

WORLD = "smithy-7"  # the scenario below, seed 7
ORI = "adaeze"


def _smithy_scenario(path: Path) -> Path:
    """The hamlet, with the player at the smithy asking Adaeze something every half second of real time,
    so her calls keep coming while the test watches."""
    scenario = json.loads((ROOT / "world" / "scenarios" / "hamlet.json").read_text())
    player = scenario["player"]
    scenario.update(name="smithy", duration_ticks=2400, reduced_duration_ticks=1200)
    player.update(
        start="smithy",
        path=[],
        crossroads=[],
        irreversible_actions=[],
        steward_directives=[],
        operator_actions=[],
        addresses=[
            {"at_tick": tick, "ori": ORI, "line": f"Adaeze, is the plough share ready? ({tick})"}
            for tick in range(40, 2400, 10)
        ],
    )
    path.write_text(json.dumps(scenario))
    return path


class Scene:
    """The running services and their console, the demo world, a browser, and where screenshots go."""

    def __init__(self, egbe: EmbeddedEgbe, browser: Browser, root: Path, viewer_token: str) -> None:
        self.egbe = egbe
        self.browser = browser
        self.root = root
        # EGBE_CONSOLE_SCREENSHOTS keeps them somewhere that outlives pytest's rotation of tmp folders.
        self.shots = Path(os.environ.get("EGBE_CONSOLE_SCREENSHOTS") or root / "screenshots")
        self.shots.mkdir(parents=True, exist_ok=True)
        self.viewer_token = viewer_token
        self.url = egbe.http["console"].rstrip("/")
        self.demo: subprocess.Popen[bytes] | None = None

    def start_demo(self) -> None:
        """The smithy world, paced to real time, against these services."""
        runs = self.root / "runs"
        runs.mkdir()
        self.demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "assembly.cli",
                "--data-dir",
                str(self.egbe.data_dir),
                "demo",
                "--scenario",
                str(_smithy_scenario(self.root / "smithy.json")),
                "--target",
                "running",
                "--realtime",
                "--quiet",
                "--runs-dir",
                str(runs),
            ],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"},
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "demo.log").open("ab"),
        )

    def stop_demo(self) -> None:
        if self.demo is not None and self.demo.poll() is None:
            self.demo.send_signal(signal.SIGKILL)
            self.demo.wait(timeout=15)

    def signed_in(self, name: str, token: str) -> tuple[BrowserContext, Page]:
        context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(f"{self.url}/signin")
        page.fill("input[name=name]", name)
        page.fill("input[name=token]", token)
        page.click("button:has-text('Sign in')")
        expect(page.locator("h1")).to_have_text("Worlds")
        return context, page

    def shot(self, page: Page, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def operator_read(self, method: str, request: object) -> object:
        with grpc.insecure_channel(self.egbe.targets["gateway"]) as channel:
            stub = gateway_pb2_grpc.OperatorServiceStub(channel)
            return getattr(stub, method)(request, metadata=bearer_metadata(self.egbe.tokens["operator"]))

    def controls(self) -> list[gateway_pb2.Control]:
        reply = self.operator_read("ListControls", gateway_pb2.ListControlsRequest(page_size=1000))
        assert isinstance(reply, gateway_pb2.ListControlsResponse)
        return list(reply.controls)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("console")
    viewer_token = secrets.token_urlsafe(24)
    viewers = root / "viewers.json"
    viewers.write_text(json.dumps({"vera": viewer_token}))
    viewers.chmod(0o600)
    config = root / "egbe.toml"
    config.write_text(f'[console]\nviewer_tokens_file = "{viewers}"\n')
    egbe = start_embedded(root / "data", command=("--config", str(config), "up"))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
            scene = Scene(egbe, browser, root, viewer_token)
            try:
                yield scene
            finally:
                scene.stop_demo()
                browser.close()
                print(f"\nconsole screenshots: {sorted(str(p) for p in scene.shots.glob('*.png'))}")
    finally:
        stop_embedded(egbe)


@pytest.fixture(scope="module")
def operator(scene: Scene) -> Iterator[Page]:
    context, page = scene.signed_in("ada", scene.egbe.tokens["operator"])
    yield page
    context.close()


def _still_the_same_document(page: Page) -> None:
    """Mark the document, so a later check can tell it was never reloaded."""
    page.evaluate("window.__notReloaded = true")


def _not_reloaded(page: Page) -> bool:
    return bool(page.evaluate("window.__notReloaded === true"))


def test_an_operator_watches_a_running_worlds_counters_and_calls_change_without_a_reload(
    scene: Scene, operator: Page
) -> None:
    page = operator
    _still_the_same_document(page)
    scene.start_demo()
    row = page.locator(f'#worlds-body tr[data-world="{WORLD}"]')
    expect(row).to_be_visible(timeout=20_000)
    calls = row.locator('[data-field="calls"]')
    expect(calls).not_to_have_text("0", timeout=10_000)
    first = int(calls.inner_text().replace(",", ""))
    expect(calls).not_to_have_text(f"{first:,}", timeout=10_000)  # more calls, same document
    assert _not_reloaded(page)
    scene.shot(page, "1-worlds")

    page.click(f"a:has-text('{WORLD}')")
    expect(page.locator("h1")).to_have_text(f"World {WORLD}")
    _still_the_same_document(page)
    stream = page.locator("#stream-body tr[data-kind=call]")
    expect(stream.first).to_be_visible(timeout=10_000)
    seen = stream.count()
    expect(stream).not_to_have_count(seen, timeout=10_000)
    assert _not_reloaded(page)
    # Offline replies are labelled so on the page that shows them.
    expect(page.locator("#offline-notice")).to_be_visible()
    expect(page.locator("#stream-body tr[data-kind=call] .badge.offline").first).to_have_text("offline")
    expect(page.locator("#speech-body li").first).to_contain_text(f"{ORI}: [offline]")
    scene.shot(page, "2-world")


def test_an_oris_page_shows_its_identity_timeline_and_each_calls_context(
    scene: Scene, operator: Page
) -> None:
    page = operator
    page.goto(f"{scene.url}/worlds/{WORLD}/ori/{ORI}")
    expect(page.locator("h1")).to_have_text(f"Ori {ORI}")
    expect(page.locator("dl.identity")).to_contain_text("Adaeze the smith")
    expect(page.locator("table").first).to_contain_text("identity_registered")
    dialogue = page.locator("details.call", has_text="dialogue").first
    dialogue.locator("summary").click()
    context = json.loads(dialogue.locator("pre.context").inner_text())
    assert context["mode"] == "dialogue"
    assert "Adaeze the smith" in json.dumps(context["untrusted"])
    assert "is the plough share ready?" in json.dumps(context["untrusted"])
    expect(dialogue.locator("pre.reply")).to_contain_text("[offline]")
    expect(dialogue).to_contain_text("v1:isis-behavior-policy")
    expect(page.locator("#offline-notice")).to_be_visible()
    scene.shot(page, "3-ori")


def test_killing_the_ori_from_its_page_refuses_its_next_call_in_the_stream_within_a_second(
    scene: Scene, operator: Page
) -> None:
    watcher = operator.context.new_page()
    watcher.goto(f"{scene.url}/worlds/{WORLD}")
    expect(watcher.locator("#stream-body tr").first).to_be_visible(timeout=10_000)
    refused = watcher.locator(f'#stream-body tr[data-kind=refused][data-ori="{ORI}"]')
    assert refused.count() == 0

    page = operator
    page.goto(f"{scene.url}/worlds/{WORLD}/ori/{ORI}")
    page.select_option("form.control select[name=action]", "kill")
    page.fill("form.control input[name=reason]", "console test: stop her calls")
    page.click("form.control button:has-text('Review')")
    expect(page.locator("#order")).to_have_text(
        f"KILL ori {ORI} in world {WORLD}: console test: stop her calls"
    )
    scene.shot(page, "4-confirm")
    page.click("form.confirm button:has-text('Confirm')")
    expect(page.locator("#outcome")).to_contain_text("committed")

    # Her next call comes within half a second (the player keeps asking); the console shows it refused
    # within the second.
    expect(refused.first).to_be_visible(timeout=1_000)
    expect(refused.first).to_contain_text(f"KILL ori {ORI} in {WORLD} by ada")
    expect(watcher.locator("#stream-body tr[data-kind=control]").first).to_contain_text("by ada")
    scene.shot(watcher, "5-world-after-kill")

    # The gateway audited the control as the signed-in operator's, as it does a CLI user's.
    (control,) = [c for c in scene.controls() if c.target == ORI]
    assert (control.operator_id, control.world_id, control.reason) == (
        "ada",
        WORLD,
        "console test: stop her calls",
    )
    attempts = scene.operator_read(
        "ListOperatorAttempts", gateway_pb2.ListOperatorAttemptsRequest(method="KILL:ORI")
    )
    assert isinstance(attempts, gateway_pb2.ListOperatorAttemptsResponse)
    assert [(a.operator_id, a.allowed) for a in attempts.attempts] == [("ada", True)]
    watcher.close()


def test_a_viewer_sees_every_page_and_is_refused_the_control(scene: Scene) -> None:
    context, page = scene.signed_in("anyone", scene.viewer_token)
    try:
        expect(page.locator(".who")).to_contain_text("vera")
        expect(page.locator(f'#worlds-body tr[data-world="{WORLD}"]')).to_be_visible(timeout=10_000)
        page.goto(f"{scene.url}/worlds/{WORLD}/ori/{ORI}")
        expect(page.locator("details.call").first).to_be_visible()
        expect(page.locator("form.control fieldset[disabled]")).to_have_count(1)
        expect(page.locator("form.control button")).to_be_disabled()
        page.goto(f"{scene.url}/controls")
        expect(page.locator("fieldset[disabled]")).to_have_count(3)
        scene.shot(page, "6-controls-viewer")
        before = len(scene.controls())
        csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
        assert csrf
        answer = page.request.post(
            f"{scene.url}/controls/apply",
            form={
                "csrf_token": csrf,
                "kind": "control",
                "action": "kill",
                "scope": "tier",
                "target": "clotho",
                "world_id": "",
                "reason": "a viewer tries",
            },
        )
        assert answer.status == 403
        assert "vera is a viewer" in answer.text()
        assert len(scene.controls()) == before
    finally:
        context.close()


def test_a_form_without_its_csrf_token_is_refused(scene: Scene, operator: Page) -> None:
    page = operator
    page.goto(f"{scene.url}/controls")
    scene.shot(page, "7-controls")
    before = len(scene.controls())
    order = {"kind": "control", "action": "kill", "scope": "tier", "target": "clotho", "reason": "forged"}
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert csrf
    for forged in (order, {**order, "csrf_token": "not-the-token"}):
        answer = page.request.post(f"{scene.url}/controls/apply", form=forged)
        assert answer.status == 403
        assert "CSRF token is missing or wrong" in answer.text()
    other_origin = page.request.post(
        f"{scene.url}/controls/apply",
        form={**order, "csrf_token": csrf},
        headers={"Origin": "http://evil.example"},
    )
    assert other_origin.status == 403
    assert len(scene.controls()) == before


def test_the_audit_page_filters_and_exports_jsonl(scene: Scene, operator: Page) -> None:
    page = operator
    page.goto(f"{scene.url}/audit?world_id={WORLD}&ori_id={ORI}&tier=clotho&method=KILL:ORI")
    calls = page.locator("details.call")
    expect(calls.first).to_be_visible()
    expect(page.locator("table")).to_contain_text("KILL:ORI")
    scene.shot(page, "8-audit")
    href = page.locator("#export").get_attribute("href")
    assert href is not None
    exported = page.request.get(f"{scene.url}{href}")
    assert exported.status == 200
    records = [json.loads(line) for line in exported.text().splitlines()]
    assert records
    assert {(r["ori"]["world_id"], r["ori"]["ori_id"], r["tier"]) for r in records} == {
        (WORLD, ORI, "COGNITION_TIER_CLOTHO")
    }
