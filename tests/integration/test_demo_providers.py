"""`egbe demo` (the hamlet scenario) with Clotho on Claude and Lachesis and Atropos on a studio's own
OpenAI-compatible server, configured as docs/gateway.md tells a studio to: its `egbe.toml` named by
EGBE_CONFIG_FILE, the keys in the variables it names. The real SDKs talk HTTP to local fakes of the
Messages API and of /v1/chat/completions, which record what reaches them; once with the local server
answering, once with it down (503 to everything), when the route's fallback to Claude answers.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assembly.embedded import DemoTarget
from assembly.settings import load_settings
from assembly.world_runs import run_demo
from services.settings import SERVICE_NAMES, Endpoint
from tests.gateway.fake_anthropic import FakeAnthropic, Scripted
from tests.gateway.fake_openai import FakeOpenAI, error_body
from tests.gateway.test_eval_cli import egbe_eval, lines, tier_bars
from tests.gateway.test_providers import documented_configs
from tests.integration.mind_checks import mind_reply
from tests.integration.test_mind_end_to_end import assert_conversations
from world.artifact import RunArtifact
from world.scenario import load_scenario

pytestmark = pytest.mark.slow
SEED = 7
OLLAMA, VLLM = 0, 1  # the documented blocks, in the order docs/gateway.md gives them
VLLM_KEY = "vllm-test-token"
# Each fake's usage is 120 input and 40 output tokens; micro-USD at Opus's price ($5/$25 per MTok)...
OPUS_MICRO_USD = 120 * 5 + 40 * 25
# ...at the Ollama block's own prices for its two models (micro-USD per MTok, rounded up)...
QWEN_14B_MICRO_USD = -(-(120 * 100_000 + 40 * 500_000) // 1_000_000)
QWEN_7B_MICRO_USD = -(-(120 * 50_000 + 40 * 250_000) // 1_000_000)
# ...and at Sonnet's and Haiku's class prices ($3/$15, $1/$5): the vLLM block prices no Claude model, so
# a call that falls back to claude-haiku-4-5 pays its own class's price.
HAIKU_MICRO_USD = 120 * 1 + 40 * 5


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(responder=mind_reply).start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    yield server
    server.stop()


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(responder=mind_reply).start()
    yield server
    server.stop()


def studio_config(block: int, local: FakeOpenAI, folder: Path) -> Path:
    """A documented `egbe.toml` with its local server's URL pointed at the fake, as a studio edits it, and
    the studio's tier bars."""
    text, replaced = re.subn(
        r'^base_url = ".*"$', f'base_url = "{local.base_url}"', documented_configs()[block], flags=re.M
    )
    assert replaced == 1
    path = folder / "egbe.toml"
    # (the vLLM block routes sonnet-class and haiku-class alike)
    path.write_text(
        text + tier_bars(("opus-class", "haiku-class" if block == VLLM else "sonnet-class", "haiku-class")),
        encoding="utf-8",
    )
    return path


def run_eval(root: Path, config_file: Path, *fakes: FakeAnthropic | FakeOpenAI) -> list[dict[str, Any]]:
    """`egbe eval` for real (a process of its own, the real SDKs over HTTP to the fakes), recording each
    tier's class's scores where the demo's gateway reads them; the fakes then forget what it sent."""
    done = egbe_eval(root / "data", config_file, environ={**os.environ, "EGBE_LOG_LEVEL": "warning"})
    for fake in fakes:
        fake.requests.clear()
    return lines(done)


async def demo(root: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch) -> RunArtifact:
    """`egbe demo --scenario hamlet --seed 7 --target embedded` under the config file, on free ports; without
    its replay check, which reruns the kernel alone and makes no model call."""
    monkeypatch.setenv("EGBE_CONFIG_FILE", str(config_file))
    settings = load_settings(
        data_dir=root / "data",
        endpoints={name: Endpoint(port=0) for name in SERVICE_NAMES},
        log_level="warning",
    )
    _, artifact = await run_demo(
        settings,
        "hamlet",
        SEED,
        root / "runs",
        progress=False,
        check_replay=False,
        target=DemoTarget.EMBEDDED,
    )
    return artifact


def calls_by_tier(artifact: RunArtifact, outcome: str = "model") -> Counter[str]:
    """Each tier's audited calls that ended so: answered by a model, or stopped by the run's kill."""
    return Counter(call.tier for call in artifact.calls if call.outcome == outcome)


def assert_reached(requests: int, answered: int, stopped: int, attempts: int = 1) -> None:
    """A provider received `attempts` requests for every answered call; a call the kill stopped in
    flight may have reached it first or not (the cancel races the request)."""
    assert attempts * answered <= requests <= attempts * (answered + stopped), (requests, answered, stopped)


def audited_by_tier(artifact: RunArtifact) -> dict[str, set[tuple[str, int, bool]]]:
    """Each tier's answered calls as (model_ref, cost, estimated): what answered and what it was billed."""
    seen: dict[str, set[tuple[str, int, bool]]] = {}
    for call in artifact.calls:
        if call.outcome == "model":
            seen.setdefault(call.tier, set()).add((call.model, call.cost_micro_usd, call.cost_estimated))
    return seen


def assert_bill_matches_audit(artifact: RunArtifact) -> None:
    """The ledger charged the run exactly what its audit records add up to, tier by tier."""
    calls, bill = artifact.calls, artifact.bill
    assert bill.model_calls_run == len(calls)
    assert bill.consumed_tokens == sum(c.input_tokens + c.output_tokens for c in calls)
    assert bill.consumed_micro_usd == sum(c.cost_micro_usd for c in calls)
    audited = {
        tier: (
            sum(1 for c in calls if c.tier == tier),
            sum(c.input_tokens + c.output_tokens for c in calls if c.tier == tier),
            sum(c.cost_micro_usd for c in calls if c.tier == tier),
        )
        for tier in {c.tier for c in calls}
    }
    assert {t.tier: (t.calls, t.tokens, t.micro_usd) for t in bill.by_tier if t.calls} == audited


def assert_answered_by_model(artifact: RunArtifact) -> None:
    assert artifact.answered_by == "model"
    assert (artifact.outcomes.failed, artifact.outcomes.answered_offline) == (0, 0)
    assert_conversations(load_scenario("hamlet"), artifact, "model")
    for conversation in artifact.conversations:
        assert conversation.reply.startswith(f"This is {conversation.ori_name}.")


async def test_each_tier_is_answered_by_its_classs_provider(
    claude: FakeAnthropic, local: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = studio_config(OLLAMA, local, tmp_path)
    evaluated = run_eval(tmp_path, config_file, claude, local)
    assert [(e["suite"], e["class"], [t["provider"] for t in e["targets"]]) for e in evaluated] == [
        ("social-judgment-live-dialogue", "opus-class", ["claude"]),
        ("offscreen-reflection-coherence", "sonnet-class", ["ollama"]),
        ("narrative-summary-continuity", "haiku-class", ["ollama"]),
    ]
    artifact = await demo(tmp_path, config_file, monkeypatch)
    assert_answered_by_model(artifact)
    tiers, stopped = calls_by_tier(artifact), calls_by_tier(artifact, "stopped")
    assert min(tiers["clotho"], tiers["lachesis"], tiers["atropos"]) > 0
    sent_to_claude = Counter(sent["model"] for sent in claude.message_requests())
    sent_locally = Counter(sent["model"] for sent in local.completion_requests())
    assert set(sent_to_claude) == {"claude-opus-4-7"}
    assert set(sent_locally) == {"qwen2.5:14b-instruct", "qwen2.5:7b-instruct"}
    assert_reached(sent_to_claude["claude-opus-4-7"], tiers["clotho"], stopped["clotho"])
    assert_reached(sent_locally["qwen2.5:14b-instruct"], tiers["lachesis"], stopped["lachesis"])
    assert_reached(sent_locally["qwen2.5:7b-instruct"], tiers["atropos"], stopped["atropos"])
    assert {headers["authorization"] for _, _, headers in local.requests} == {"Bearer no-key"}
    assert audited_by_tier(artifact) == {
        "clotho": {("claude:claude-opus-4-7", OPUS_MICRO_USD, False)},
        "lachesis": {("ollama:qwen2.5:14b-instruct", QWEN_14B_MICRO_USD, False)},
        "atropos": {("ollama:qwen2.5:7b-instruct", QWEN_7B_MICRO_USD, False)},
    }
    assert_bill_matches_audit(artifact)


async def test_with_the_local_server_down_lachesis_and_atropos_fall_back_to_claude(
    claude: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", VLLM_KEY)
    up = FakeOpenAI(responder=mind_reply).start()  # evaluated while it answered
    try:
        run_eval(tmp_path, studio_config(VLLM, up, tmp_path), claude)
    finally:
        up.stop()
    down = FakeOpenAI(unscripted=Scripted(503, error_body("no capacity", "server_error"))).start()
    try:
        artifact = await demo(tmp_path, studio_config(VLLM, down, tmp_path), monkeypatch)
    finally:
        down.stop()
    assert_answered_by_model(artifact)
    tiers, stopped = calls_by_tier(artifact), calls_by_tier(artifact, "stopped")
    fallen_back = tiers["lachesis"] + tiers["atropos"]
    stopped_local = stopped["lachesis"] + stopped["atropos"]
    assert min(tiers["clotho"], tiers["lachesis"], tiers["atropos"]) > 0
    sent_to_claude = Counter(sent["model"] for sent in claude.message_requests())
    sent_locally = Counter(sent["model"] for sent in down.completion_requests())
    assert set(sent_to_claude) == {"claude-opus-4-7", "claude-haiku-4-5"}
    assert set(sent_locally) == {"Qwen/Qwen2.5-14B-Instruct"}
    assert_reached(sent_to_claude["claude-opus-4-7"], tiers["clotho"], stopped["clotho"])
    assert_reached(sent_to_claude["claude-haiku-4-5"], fallen_back, stopped_local)
    # The block gives the vLLM server two attempts per call before the route moves on.
    assert_reached(sent_locally["Qwen/Qwen2.5-14B-Instruct"], fallen_back, stopped_local, attempts=2)
    assert {headers["authorization"] for _, _, headers in down.requests} == {f"Bearer {VLLM_KEY}"}
    assert audited_by_tier(artifact) == {
        "clotho": {("claude:claude-opus-4-7", OPUS_MICRO_USD, False)},
        "lachesis": {("claude:claude-haiku-4-5", HAIKU_MICRO_USD, False)},
        "atropos": {("claude:claude-haiku-4-5", HAIKU_MICRO_USD, False)},
    }
    assert_bill_matches_audit(artifact)


async def test_a_rate_limited_local_server_defers_calls_and_fails_none(
    claude: FakeAnthropic, local: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = studio_config(OLLAMA, local, tmp_path)
    run_eval(tmp_path, config_file, claude, local)
    # One request a minute, strictly paced: the local server's first call leaves, and a later call whose
    # turn comes past its deadline (the kernel gives a call 30 s) is deferred.
    limited, replaced = re.subn(
        r"^(\[gateway\.providers\.ollama\]\n)",
        r"\1requests_per_minute = 1\nrate_burst_seconds = 0\n",
        config_file.read_text(encoding="utf-8"),
        flags=re.M,
    )
    assert replaced == 1
    config_file.write_text(limited, encoding="utf-8")
    artifact = await demo(tmp_path, config_file, monkeypatch)
    deferred = calls_by_tier(artifact, "deferred")
    assert artifact.outcomes.failed == 0
    assert artifact.outcomes.deferred == deferred["lachesis"] + deferred["atropos"] > 0
    # A deferred call never reached the server: what it received is what it answered.
    answered, stopped = calls_by_tier(artifact), calls_by_tier(artifact, "stopped")
    assert_reached(
        len(local.completion_requests()),
        answered["lachesis"] + answered["atropos"],
        stopped["lachesis"] + stopped["atropos"],
    )
    # Clotho's provider has no limit: every line a player spoke to an Ori was answered by Claude.
    assert artifact.answered_by == "model"
    assert_conversations(load_scenario("hamlet"), artifact, "model")
    assert {c.model for c in artifact.calls if c.outcome == "deferred"} <= {
        "ollama:qwen2.5:14b-instruct",
        "ollama:qwen2.5:7b-instruct",
    }
    assert_bill_matches_audit(artifact)
