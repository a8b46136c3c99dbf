"""The hamlet scenario end to end over real gRPC: every prompt names its Ori, the player's lines reach
dialogue calls, the crossroads reach their Ori, and the replies come back to the world.

Once through the real `anthropic` SDK against a local fake of the Messages API that records every
request (the prompt a model would actually receive), once through the offline adapter.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from assembly.embedded import DemoTarget, services_for_run
from assembly.settings import EgbeSettings, load_settings
from services.settings import SERVICE_NAMES, Endpoint
from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.harness import record_route_scores
from tests.integration.mind_checks import (
    Prompt,
    check_prompts,
    check_situations,
    echoed_outputs,
    mind_reply,
    prompt_from_audit,
    prompt_from_request,
)
from world.artifact import RunArtifact
from world.clients import ServiceClients
from world.collect import audit_records
from world.report import write_report
from world.run import RunOptions, execute, new_run_id
from world.run_folder import REPORT_FILE
from world.scenario import Scenario, load_scenario

pytestmark = pytest.mark.slow
SEED = 7


def isolated_settings(data_dir: Path) -> EgbeSettings:
    return load_settings(
        data_dir=data_dir, endpoints={name: Endpoint(port=0) for name in SERVICE_NAMES}, log_level="warning"
    )


@dataclass(frozen=True)
class HamletRun:
    scenario: Scenario
    artifact: RunArtifact
    prompts: list[Prompt]  # every audited call's prompt, as the gateway handed it to the adapter
    outputs: list[str]  # every audited call's output, in the order the gateway recorded them


async def run_hamlet(root: Path) -> HamletRun:
    """The whole hamlet run; its artifact and the audit log (read while the services run)."""
    scenario = load_scenario("hamlet")
    settings = isolated_settings(root / "data")
    if os.environ.get("ANTHROPIC_API_KEY"):  # a model answers: the routes need their eval scores
        await record_route_scores(settings)
    run_id = new_run_id(scenario, SEED)
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    async with services_for_run(
        settings, run_dir, scenario.snapshot_every_ticks, DemoTarget.EMBEDDED
    ) as services:
        artifact = await execute(
            services, options=RunOptions(scenario, SEED, progress=False), run_dir=run_dir, run_id=run_id
        )
        clients = ServiceClients.dial(services.targets, services.tokens, services.settings)
        try:
            records = await audit_records(clients, f"{scenario.name}-{SEED}")
        finally:
            await clients.close()
    write_report(artifact, run_dir / REPORT_FILE)
    ordered = sorted(records.values(), key=lambda r: (r.recorded_at.ToNanoseconds(), r.call_id))
    prompts = [prompt_from_audit(r) for r in ordered if r.input_context.fields]
    return HamletRun(scenario, artifact, prompts, [r.output for r in ordered if r.output])


def assert_conversations(scenario: Scenario, artifact: RunArtifact, source: str) -> None:
    """Each line the player said was answered by the Ori it was said to, and the reply reached the world."""
    said = [(a.at_tick, a.ori, a.line) for a in scenario.player.addresses]
    heard = [(c.line_tick, c.ori_id, c.line) for c in artifact.conversations]
    assert heard == said
    for conversation in artifact.conversations:
        assert conversation.answered, conversation
        assert conversation.reply
        assert conversation.source == source
        assert conversation.reply_tick is not None
        assert conversation.reply_tick > conversation.line_tick


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(responder=mind_reply).start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    yield server
    server.stop()


async def test_hamlet_through_the_anthropic_sdk(fake_model: FakeAnthropic, tmp_path: Path) -> None:
    run = await run_hamlet(tmp_path)
    scenario, artifact, audited = run.scenario, run.artifact, run.prompts
    received = [prompt_from_request(params) for params in fake_model.message_requests()]
    assert received
    assert len(received) == len(audited)
    assert check_prompts(received, scenario) == []
    # The fake cannot see ticks; the audit (the same prompts, as the gateway sent them) can.
    assert check_situations(audited, scenario) == []
    assert check_situations(received, scenario) == []
    assert artifact.answered_by == "model"
    assert_conversations(scenario, artifact, "model")
    for conversation in artifact.conversations:
        assert conversation.reply.startswith(f"This is {conversation.ori_name}.")


async def test_hamlet_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    run = await run_hamlet(tmp_path)
    scenario, artifact, prompts = run.scenario, run.artifact, run.prompts
    assert prompts
    assert check_prompts(prompts, scenario) == []
    assert check_situations(prompts, scenario) == []
    assert_conversations(scenario, artifact, "offline")
    outputs = run.outputs
    assert len(set(outputs)) * 10 >= len(outputs) * 8  # at least 80% distinct
    assert echoed_outputs(outputs) == []
    html = (tmp_path / "runs" / artifact.run_id / REPORT_FILE).read_text()
    conversations = html.split('id="conversations"', 1)[1]
    for address in scenario.player.addresses:
        assert address.line in conversations
