"""`egbe eval` end to end: a real CLI process records each target's scores in the store (the offline
adapter's, and a providers table's through the real `openai` SDK over HTTP to the local fake), and a
gateway started afterwards routes by them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.server import build_gateway
from services.settings import UserError
from tests.conftest import ROOT
from tests.gateway.fake_openai import FakeOpenAI
from tests.gateway.harness import ATROPOS, CLOTHO, LACHESIS, gateway_settings
from tests.integration.mind_checks import mind_reply

SUITES = ("social-judgment-live-dialogue", "offscreen-reflection-coherence", "narrative-summary-continuity")
# The offline adapter's seeded scores on the shipped suites (version 1), in SUITES order.
OFFLINE_BP = (8_657, 8_489, 8_437)


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(responder=mind_reply).start()
    yield server
    server.stop()


def tier_bars(classes: Sequence[str]) -> str:
    """Each tier's TOML table: its suite, a bar of 6,000 bp (the fakes answer for the wiring, not for
    quality), and the class it selects (in SUITES order: Clotho, Lachesis, Atropos)."""
    return "".join(
        f'\n[gateway.routing.{tier}]\neval_suite = "{suite}"\nrequired_quality_bp = 6_000\n'
        f'selected_model_class = "{model_class}"\n'
        for tier, suite, model_class in zip(("clotho", "lachesis", "atropos"), SUITES, classes, strict=True)
    )


def studio_toml(local: FakeOpenAI) -> str:
    """Every class routed to the local server, falling back to the offline provider; every tier on the
    smallest class (the classes share a route, so they score alike) with a bar the fakes clear."""
    route = (
        '[{ provider = "local", model_id = "qwen-test" },'
        ' { provider = "offline", model_id = "deterministic-v1" }]'
    )
    tiers = tier_bars(("haiku-class",) * 3)
    return (
        f'[gateway.providers.local]\nkind = "openai-compatible"\nbase_url = "{local.base_url}"\n'
        '[gateway.providers.offline]\nkind = "offline"\n'
        f"[gateway.routing.class_targets]\nopus-class = {route}\nsonnet-class = {route}\n"
        f"haiku-class = {route}\n{tiers}"
    )


def egbe_eval(
    data_dir: Path, config: Path, *args: str, environ: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`egbe eval` as a process of its own, under `environ` (default: ours without any EGBE_ or
    ANTHROPIC_ variable, so only the config file decides)."""
    if environ is None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("EGBE_", "ANTHROPIC_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "assembly.cli",
            "--data-dir",
            str(data_dir),
            "--config",
            str(config),
            "eval",
            *args,
        ],
        cwd=ROOT,
        env=dict(environ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


async def test_recorded_scores_are_what_a_gateway_started_afterwards_routes_by(
    local: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "egbe.toml"
    config.write_text(studio_toml(local), encoding="utf-8")
    offline = lines(egbe_eval(tmp_path, config, "--offline"))
    assert [(o["suite"], o["version"], o["class"]) for o in offline] == [
        (s, 1, "haiku-class") for s in SUITES
    ]
    targets = [[(t["provider"], t["model_id"], t["score_bp"], t["cases"], t["offline"]) for t in o["targets"]]
               for o in offline]  # fmt: skip
    assert targets == [[("offline", "deterministic-v1", bp, 24, True)] for bp in OFFLINE_BP]
    assert offline[0]["targets"][0]["failed_checks"] == {"persona.locale": 9, "rubric.mention": 20}

    monkeypatch.setenv("EGBE_CONFIG_FILE", str(config))
    settings = gateway_settings(tmp_path)
    with pytest.raises(UserError) as refused:  # the local target has no score yet: no class qualifies
        await build_gateway(settings)
    assert str(refused.value).splitlines()[0] == (
        f"routing.clotho.selected_model_class: haiku-class has no recorded score on {SUITES[0]};"
        f" run `egbe eval --suite {SUITES[0]} --class haiku-class`"
    )
    assert local.completion_requests() == []

    evaluated = lines(egbe_eval(tmp_path, config))  # each tier's suite against its class's whole route
    assert [[(t["provider"], t["offline"]) for t in e["targets"]] for e in evaluated] == [
        [("local", False), ("offline", True)]
    ] * 3
    assert [e["targets"][1]["score_bp"] for e in evaluated] == list(OFFLINE_BP)
    assert all(e["class_score_bp"] == min(t["score_bp"] for t in e["targets"]) for e in evaluated)
    sent = local.completion_requests()
    assert len(sent) == 3 * 24
    assert {s["model"] for s in sent} == {"qwen-test"}
    assert {s["response_format"]["type"] for s in sent} == {"json_schema"}

    gateway = await build_gateway(settings)
    try:
        routes = [gateway.routes.describe(tier) for tier in (CLOTHO, LACHESIS, ATROPOS)]
        assert [(r.quality_bp, r.evaluated, r.smallest_qualified) for r in routes] == [
            (e["class_score_bp"], True, True) for e in evaluated
        ]
    finally:
        await gateway.stop()


def test_user_errors_name_the_fix_without_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "egbe.toml"
    config.write_text("", encoding="utf-8")
    for args, message in (
        (("--suite", "vibes"), f"egbe: unknown eval suite 'vibes'; shipped suites: {', '.join(SUITES)}"),
        (
            ("--class", "gpt-class"),
            "egbe: unknown model class 'gpt-class';"
            " routing.candidates has: haiku-class, sonnet-class, opus-class",
        ),
    ):
        done = egbe_eval(tmp_path, config, *args)
        assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")
