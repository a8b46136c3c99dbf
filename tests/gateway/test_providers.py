"""The providers table: refused at start naming the field when wrong, else one client per provider and
each call routed by its class (Clotho on the fake Anthropic API, Lachesis and Atropos on the fake
OpenAI-compatible server), audited with the provider that answered and billed at its price."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assembly.settings import EgbeSettings, load_settings
from egbe.v1 import gateway_pb2
from gateway.adapters.base import ModelRequest
from gateway.config import ClassPrice, GatewayConfig, ModelTarget, ProviderConfig, RoutingConfig
from gateway.cost import estimate_tokens
from gateway.provider_errors import ProviderAttempt, ProviderError
from gateway.routing import config_violations, select_route
from gateway.server import build_adapter
from services.auth import Role
from services.errors import InvalidArgument
from services.local_cluster import free_ports
from tests.conftest import ROOT
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic, Scripted
from tests.gateway.fake_anthropic import error_body as anthropic_error
from tests.gateway.fake_openai import COMPLETION_TOKENS, PROMPT_TOKENS, FakeOpenAI
from tests.gateway.fake_openai import error_body as openai_error
from tests.gateway.harness import ATROPOS, CLOTHO, LACHESIS, GatewayHarness, gateway_settings, start_gateway
from tests.prometheus_samples import exposed_samples, scrape

KEY_ENV = "EGBE_TEST_CLAUDE_KEY"
LOCAL_7B = "qwen2.5:7b-instruct"
LOCAL_14B = "qwen2.5:14b-instruct"
# The local 7b model's price at the studio's own server: micro-USD per MTok (a tenth of Haiku's).
LOCAL_PRICE = ClassPrice(
    input_per_mtok=100_000, output_per_mtok=500_000, cache_read_per_mtok=0, cache_write_per_mtok=0
)
# Each fake's usage (120 input, 40 output tokens) at: Opus $5/$25 per MTok, Sonnet $3/$15, the 7b model's own.
OPUS_MICRO_USD = 120 * 5 + 40 * 25
SONNET_MICRO_USD = PROMPT_TOKENS * 3 + COMPLETION_TOKENS * 15
LOCAL_7B_MICRO_USD = (PROMPT_TOKENS * 100_000 + COMPLETION_TOKENS * 500_000) // 1_000_000


def targets(local_url: str = "http://127.0.0.1:1/v1") -> tuple[dict[str, ProviderConfig], RoutingConfig]:
    providers = {
        "claude": ProviderConfig(kind="anthropic", api_key_env=KEY_ENV),
        "local": ProviderConfig(kind="openai-compatible", base_url=local_url, prices={LOCAL_7B: LOCAL_PRICE}),
    }
    routing = RoutingConfig(
        class_targets={
            "opus-class": [ModelTarget(provider="claude", model_id="claude-opus-4-7")],
            "sonnet-class": [ModelTarget(provider="local", model_id=LOCAL_14B)],
            "haiku-class": [ModelTarget(provider="local", model_id=LOCAL_7B)],
        }
    )
    return providers, routing


def violations(config: GatewayConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    return {
        v.field: v.description
        for v in config_violations(config, {KEY_ENV: "sk-test"} if environ is None else environ)
    }


def test_a_valid_table_routes_each_class_to_its_providers_model() -> None:
    providers, routing = targets()
    config = GatewayConfig(providers=providers, routing=routing)
    assert violations(config) == {}
    assert select_route(routing, LACHESIS, None).concrete_model_id == LOCAL_14B
    assert select_route(routing, CLOTHO, None).concrete_model_id == "claude-opus-4-7"


def test_an_unknown_provider_is_refused_naming_the_target() -> None:
    providers, routing = targets()
    steps = {**routing.class_targets, "haiku-class": [ModelTarget(provider="vllm", model_id=LOCAL_7B)]}
    config = GatewayConfig(providers=providers, routing=RoutingConfig(class_targets=steps))
    assert violations(config) == {
        "routing.class_targets.haiku-class[0].provider": "unknown provider 'vllm' (providers: claude, local)"
    }


def test_a_class_mapped_to_nothing_is_refused_naming_the_class() -> None:
    providers, routing = targets()
    steps = {name: steps for name, steps in routing.class_targets.items() if name != "sonnet-class"}
    config = GatewayConfig(providers=providers, routing=RoutingConfig(class_targets=steps))
    assert violations(config) == {
        "routing.class_targets.sonnet-class": "every candidate class needs a provider and model id"
    }


def test_a_providers_table_with_no_class_mapped_is_refused() -> None:
    providers, _ = targets()
    assert violations(GatewayConfig(providers=providers)) == {
        "routing.class_targets": "a providers table needs every candidate class mapped to it"
    }


def test_a_target_for_a_class_that_is_no_candidate_is_refused() -> None:
    providers, routing = targets()
    steps = {**routing.class_targets, "tiny-class": [ModelTarget(provider="local", model_id=LOCAL_7B)]}
    config = GatewayConfig(providers=providers, routing=RoutingConfig(class_targets=steps))
    assert violations(config) == {"routing.class_targets.tiny-class": "not a candidate class"}


def test_a_missing_key_variable_or_url_is_refused_naming_the_provider_field() -> None:
    providers, routing = targets()
    providers["local"] = ProviderConfig(kind="openai-compatible", api_key_env="EGBE_TEST_LOCAL_KEY")
    providers["claude"] = ProviderConfig(kind="anthropic")
    config = GatewayConfig(providers=providers, routing=routing)
    assert violations(config, {}) == {
        "providers.local.base_url": "an openai-compatible provider needs its URL",
        "providers.local.api_key_env": "EGBE_TEST_LOCAL_KEY is not set",
        "providers.claude.api_key_env": "an anthropic provider needs the variable holding its key",
    }
    providers["claude"] = ProviderConfig(kind="anthropic", api_key_env=KEY_ENV)
    config = GatewayConfig(providers=providers, routing=routing)
    assert violations(config, {"EGBE_TEST_LOCAL_KEY": "k"})["providers.claude.api_key_env"] == (
        f"{KEY_ENV} is not set"
    )


def documented_configs() -> list[str]:
    """The TOML blocks of docs/gateway.md's "Providers" section: how to point Lachesis and Atropos at
    Ollama, vLLM and llama.cpp's server."""
    section = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8").split("\n## Providers\n")[1]
    section = section.split("\n## ")[0]
    return [block.split("```")[0] for block in section.split("```toml\n")[1:]]


@pytest.mark.parametrize("index", range(3))
async def test_each_documented_local_server_config_is_one_the_gateway_starts_on(
    tmp_path: Path, index: int
) -> None:
    path = tmp_path / "egbe.toml"
    path.write_text(documented_configs()[index], encoding="utf-8")
    config = load_settings(config_file=path, data_dir=tmp_path).gateway
    environ = {"ANTHROPIC_API_KEY": "sk-test", "VLLM_API_KEY": "token"}
    assert config_violations(config, environ) == []
    first = {
        tier: config.routing.class_targets[select_route(config.routing, tier, None).model_class][0]
        for tier in (CLOTHO, LACHESIS, ATROPOS)
    }
    kinds = {tier: config.providers[target.provider].kind for tier, target in first.items()}
    assert kinds == {CLOTHO: "anthropic", LACHESIS: "openai-compatible", ATROPOS: "openai-compatible"}
    assert all(
        first[tier].model_id in config.providers[first[tier].provider].prices for tier in (LACHESIS, ATROPOS)
    )
    adapter = build_adapter(config, environ)
    await adapter.close()
    assert adapter.name == "providers"


async def test_a_gateway_with_a_bad_table_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    providers, routing = targets()
    with pytest.raises(InvalidArgument) as refused:
        await start_gateway(gateway_settings(tmp_path, None, providers=providers, routing=routing))
    assert [v.field for v in refused.value.violations] == ["providers.claude.api_key_env"]


async def runs(
    settings: EgbeSettings, *tiers: int
) -> list[tuple[gateway_pb2.RunResponse, gateway_pb2.AuditRecord]]:
    """A `Run` per tier, one after the other, on a gateway started with `settings`, each with its audit
    record."""
    harness = await start_gateway(settings)
    answered = []
    try:
        for tier in tiers:
            reply = await harness.run(f"ori-{tier}", tier=tier)
            [record] = await harness.audit_records(run_id=reply.admission.run_id)
            answered.append((reply, record))
    finally:
        await harness.stop()
    return answered


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def claude_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")


@pytest.fixture
def fakes(fake: FakeAnthropic, local: FakeOpenAI, claude_key: None) -> tuple[FakeAnthropic, FakeOpenAI]:
    """The fake Anthropic API (its key in the variable the table names) and the fake local server."""
    return fake, local


async def test_each_tier_is_answered_by_its_classs_provider_audited_and_billed_at_its_price(
    tmp_path: Path, database_url: str | None, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    fake, local = fakes
    providers, routing = targets(local.base_url)
    tiers = (CLOTHO, LACHESIS, ATROPOS)
    answered = await runs(
        gateway_settings(tmp_path, database_url, providers=providers, routing=routing), *tiers
    )
    replies = {tier: reply for tier, (reply, _) in zip(tiers, answered, strict=True)}
    records = {tier: record for tier, (_, record) in zip(tiers, answered, strict=True)}
    assert [sent["model"] for sent in fake.message_requests()] == ["claude-opus-4-7"]
    assert [sent["model"] for sent in local.completion_requests()] == [LOCAL_14B, LOCAL_7B]
    assert {tier: record.model_ref for tier, record in records.items()} == {
        CLOTHO: "claude:claude-opus-4-7",
        LACHESIS: f"local:{LOCAL_14B}",
        ATROPOS: f"local:{LOCAL_7B}",
    }
    # Opus and the 14b model at their classes' prices (no price of their own), the 7b at its own.
    assert {tier: (record.cost.micro_usd, record.cost.estimated) for tier, record in records.items()} == {
        CLOTHO: (OPUS_MICRO_USD, False),
        LACHESIS: (SONNET_MICRO_USD, False),
        ATROPOS: (LOCAL_7B_MICRO_USD, False),
    }
    assert {tier: reply.generation.model_ref for tier, reply in replies.items()} == {
        tier: record.model_ref for tier, record in records.items()
    }
    assert not any(reply.generation.offline for reply in replies.values())


@pytest.mark.usefixtures("claude_key")
async def test_a_server_that_reports_no_usage_is_billed_as_an_estimate(
    tmp_path: Path, database_url: str | None, local: FakeOpenAI
) -> None:
    local.report_usage = False
    providers, routing = targets(local.base_url)
    [(reply, record)] = await runs(
        gateway_settings(tmp_path, database_url, providers=providers, routing=routing), ATROPOS
    )
    # The len/4 estimate of what was sent and answered, at the provider's price, labelled estimated.
    usage = record.usage
    assert usage.output_tokens == estimate_tokens(local.reply_text)
    assert usage.input_tokens >= estimate_tokens(local.completion_requests()[0]["messages"][1]["content"])
    micro_usd = -(-(usage.input_tokens * 100_000 + usage.output_tokens * 500_000) // 1_000_000)
    assert (record.cost.micro_usd, record.cost.estimated, record.model_ref) == (
        micro_usd,
        True,
        f"local:{LOCAL_7B}",
    )
    assert (reply.generation.cost.micro_usd, reply.generation.cost.estimated) == (micro_usd, True)


def fallback_route(local_url: str) -> tuple[dict[str, ProviderConfig], RoutingConfig]:
    """Lachesis's class on the local server, then Claude Haiku; the local server gets one attempt, so a
    transient error moves the call on at once."""
    providers, routing = targets(local_url)
    providers["local"] = providers["local"].model_copy(update={"max_attempts": 1})
    providers["claude"] = providers["claude"].model_copy(
        update={"max_attempts": 1, "prices": {"claude-haiku-4-5": GatewayConfig().cost.prices["haiku-class"]}}
    )
    local_then_haiku = [
        ModelTarget(provider="local", model_id=LOCAL_14B),
        ModelTarget(provider="claude", model_id="claude-haiku-4-5"),
    ]
    return providers, RoutingConfig(class_targets={**routing.class_targets, "sonnet-class": local_then_haiku})


async def retry_stats(harness: GatewayHarness) -> dict[str, Any]:
    reply = await harness.operator.GetRetryStats(
        gateway_pb2.GetRetryStatsRequest(), metadata=harness.metadata(Role.OPERATOR)
    )
    return json_format.MessageToDict(reply.stats)


@pytest.mark.parametrize(
    ("answer", "error_class"),
    [
        (Scripted(529, openai_error("overloaded", "overloaded_error")), "overloaded"),
        (Scripted(503, openai_error("no capacity", "server_error")), "overloaded"),
        (Scripted(429, openai_error("slow down", "rate_limit_error")), "rate_limit"),
        (Scripted(delay_seconds=1.0), "timeout"),
    ],
)
async def test_a_transient_failure_falls_back_to_the_next_provider_in_the_same_run(
    tmp_path: Path,
    database_url: str | None,
    fakes: tuple[FakeAnthropic, FakeOpenAI],
    answer: Scripted,
    error_class: str,
    *,
    spans: InMemorySpanExporter,
) -> None:
    fake, local = fakes
    providers, routing = fallback_route(local.base_url)
    providers["local"] = providers["local"].model_copy(update={"request_timeout_seconds": 0.3})
    local.script.append(answer)
    harness = await start_gateway(
        gateway_settings(tmp_path, database_url, providers=providers, routing=routing)
    )
    try:
        run = await harness.admit("ada", LACHESIS)
        answered = await harness.generate(run.run_id)
        await harness.end(run.run_id)
        [record] = await harness.audit_records(run_id=run.run_id)
        stats = await retry_stats(harness)
        spend = await harness.spend()
    finally:
        await harness.stop()
    assert [sent["model"] for sent in local.completion_requests()] == [LOCAL_14B]
    assert [sent["model"] for sent in fake.message_requests()] == ["claude-haiku-4-5"]
    assert (answered.model_ref, record.model_ref) == ("claude:claude-haiku-4-5", "claude:claude-haiku-4-5")
    assert json_format.MessageToDict(record.input_context)["providers_tried"] == [
        {"provider": "local", "model_id": LOCAL_14B, "attempts": 1.0, "error_class": error_class},
        {"provider": "claude", "model_id": "claude-haiku-4-5", "attempts": 1.0, "error_class": ""},
    ]
    # One call, one record, one charge: Haiku's price on Claude's usage, from the run's one reservation.
    assert (record.cost.micro_usd, record.cost.estimated, record.error_class) == (120 * 1 + 40 * 5, False, "")
    assert (spend.consumed_tokens, spend.reserved_tokens, spend.consumed_micro_usd) == (
        120 + 40,
        0,
        120 + 200,
    )
    assert stats["providerFallbacks"] == {"local": 1.0, "total": 1.0, "runsPresent": 1.0}
    assert stats["providerErrors"] == {error_class: 1.0, "total": 1.0, "runsPresent": 1.0}
    # The model call's span names who answered, past the route's first provider.
    [model_span] = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert model_span.attributes is not None
    answered_by = (model_span.attributes["egbe.provider"], model_span.attributes["gen_ai.response.model"])
    assert answered_by == ("claude", "claude-haiku-4-5")


@pytest.mark.parametrize(
    ("answer", "error_class"),
    [
        (Scripted(429, openai_error("quota", "insufficient_quota", "insufficient_quota")), "billing"),
        (Scripted(400, openai_error("bad request")), "invalid_request"),
        (Scripted(401, openai_error("bad key", "authentication_error")), "authentication"),
    ],
)
async def test_a_spend_limit_or_a_4xx_never_falls_back(
    tmp_path: Path, fakes: tuple[FakeAnthropic, FakeOpenAI], answer: Scripted, error_class: str
) -> None:
    fake, local = fakes
    providers, routing = fallback_route(local.base_url)
    local.script.append(answer)
    harness = await start_gateway(gateway_settings(tmp_path, None, providers=providers, routing=routing))
    try:
        run = await harness.admit("ada", LACHESIS)
        with pytest.raises(grpc.aio.AioRpcError):
            await harness.generate(run.run_id)
        [record] = await harness.audit_records(run_id=run.run_id)
    finally:
        await harness.stop()
    assert fake.message_requests() == []
    assert (record.error_class, record.model_ref) == (error_class, f"local:{LOCAL_14B}")
    assert json_format.MessageToDict(record.input_context)["providers_tried"] == [
        {"provider": "local", "model_id": LOCAL_14B, "attempts": 1.0, "error_class": error_class}
    ]


async def test_a_call_every_provider_fails_names_them_all_and_is_unavailable(
    tmp_path: Path, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    fake, local = fakes
    providers, routing = fallback_route(local.base_url)
    local.script.append(Scripted(503, openai_error("no capacity", "server_error")))
    fake.script.append(Scripted(529, anthropic_error("overloaded_error", "Overloaded")))
    [metrics_port] = free_ports(1)
    settings = gateway_settings(
        tmp_path, None, providers=providers, routing=routing, metrics_port=metrics_port
    )
    harness = await start_gateway(settings)
    try:
        run = await harness.admit("ada", LACHESIS)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await harness.generate(run.run_id)
        await harness.end(run.run_id)
        [record] = await harness.audit_records(run_id=run.run_id)
        stats = await retry_stats(harness)
        samples = exposed_samples(await asyncio.to_thread(scrape, metrics_port))
    finally:
        await harness.stop()
    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert (record.error_class, record.output, record.cost.micro_usd) == ("overloaded", "", 0)
    assert record.model_ref == "claude:claude-haiku-4-5"  # the last provider tried
    assert json_format.MessageToDict(record.input_context)["providers_tried"] == [
        {"provider": "local", "model_id": LOCAL_14B, "attempts": 1.0, "error_class": "overloaded"},
        {"provider": "claude", "model_id": "claude-haiku-4-5", "attempts": 1.0, "error_class": "overloaded"},
    ]
    assert stats["providerFallbacks"] == {"local": 1.0, "total": 1.0, "runsPresent": 1.0}
    assert stats["providerErrors"] == {"overloaded": 2.0, "total": 2.0, "runsPresent": 1.0}
    assert samples[("egbe_gateway_provider_fallbacks_total", (("provider", "local"),))] == 1
    assert samples[("egbe_gateway_provider_errors_total", (("error_class", "overloaded"),))] == 2


async def test_an_offline_table_answers_labelled_offline(tmp_path: Path, database_url: str | None) -> None:
    offline = [ModelTarget(provider="stand-in", model_id="deterministic")]
    routing = RoutingConfig(
        class_targets=dict.fromkeys(("opus-class", "sonnet-class", "haiku-class"), offline)
    )
    providers = {"stand-in": ProviderConfig(kind="offline")}
    [(reply, record)] = await runs(
        gateway_settings(tmp_path, database_url, providers=providers, routing=routing), LACHESIS
    )
    assert (reply.generation.offline, reply.generation.cost.estimated) == (True, True)
    assert (record.model_ref, record.offline, reply.generation.model_ref) == (
        "offline:deterministic-v1",
        True,
        "offline:deterministic-v1",
    )


async def test_a_call_whose_deadline_passed_on_one_provider_does_not_fall_back(
    fakes: tuple[FakeAnthropic, FakeOpenAI],
) -> None:
    fake, local = fakes
    local.script.append(Scripted(delay_seconds=SLOW_MODEL_SECONDS))
    providers, routing = fallback_route(local.base_url)
    router = build_adapter(GatewayConfig(providers=providers, routing=routing))
    request = ModelRequest(
        system_policy="You are Ada.",
        task_instruction="Answer Bram.",
        model_class="sonnet-class",
        deadline=time.monotonic() + 0.5,
    )
    try:
        with pytest.raises(ProviderError) as timed_out:
            await asyncio.wait_for(router.generate(request), SLOW_MODEL_SECONDS / 2)
    finally:
        await router.close()
    assert timed_out.value.providers_tried == (ProviderAttempt("local", LOCAL_14B, 1, "timeout"),)
    assert fake.message_requests() == []
