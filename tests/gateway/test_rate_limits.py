"""Providers' rate limits: each call books its turn on its provider's schedule in the store, shared by
every gateway on it; it waits for a turn that comes before its deadline, and is deferred (never sent,
never failed) when none does, falling to the next provider of its route where there is one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from egbe.v1 import gateway_pb2
from gateway.config import LeaseConfig, ProviderConfig
from gateway.store.rates import MINUTE_US, RateLimit, rate_turn
from services.auth import Role
from services.local_cluster import free_ports
from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.fake_openai import FakeOpenAI
from tests.gateway.harness import (
    LACHESIS,
    GatewayHarness,
    backend_store,
    gateway_settings,
    run_request,
    start_gateway,
)
from tests.gateway.test_providers import KEY_ENV, LOCAL_14B, fallback_route, targets
from tests.prometheus_samples import exposed_samples, scrape

SECOND_US = 1_000_000


def turns(limit: RateLimit, calls: list[tuple[int, int]], max_wait_us: int = 10**15) -> list[int]:
    """Each call's wait, for calls (at Unix µs, tokens) made one after the other on one schedule."""
    booked, waits = (0, 0), []
    for now_us, tokens in calls:
        turn, booked = rate_turn(booked, limit, tokens=tokens, now_us=now_us, max_wait_us=max_wait_us)
        assert turn.granted
        waits.append(turn.wait_us)
    return waits


def test_strict_pacing_spaces_calls_by_the_minute_over_the_limit() -> None:
    limit = RateLimit(requests_per_minute=120, tokens_per_minute=0, burst_us=0)
    assert turns(limit, [(0, 10)] * 4) == [0, SECOND_US // 2, SECOND_US, 3 * SECOND_US // 2]


def test_an_idle_provider_takes_a_bursts_worth_at_once_then_is_paced() -> None:
    limit = RateLimit(requests_per_minute=60, tokens_per_minute=0, burst_us=6 * SECOND_US)
    assert turns(limit, [(0, 10)] * 9) == [0] * 7 + [SECOND_US, 2 * SECOND_US]


def test_an_idle_spell_earns_one_burst_not_the_idle_times_worth() -> None:
    limit = RateLimit(requests_per_minute=60, tokens_per_minute=0, burst_us=6 * SECOND_US)
    later = 10 * MINUTE_US
    waits = turns(limit, [(0, 10)] + [(later, 10)] * 9)
    assert waits == [0] + [0] * 7 + [SECOND_US, 2 * SECOND_US]


def test_tokens_are_paced_too_and_a_large_call_on_an_idle_schedule_leaves_at_once() -> None:
    limit = RateLimit(requests_per_minute=0, tokens_per_minute=1_000, burst_us=0)
    # 900 tokens book 54 s of the schedule; the next call waits for them.
    assert turns(limit, [(0, 900), (0, 10), (60 * SECOND_US, 10)]) == [0, 54 * SECOND_US, 0]


def test_a_call_that_cannot_start_in_time_books_nothing() -> None:
    limit = RateLimit(requests_per_minute=1, tokens_per_minute=0, burst_us=0)
    first, booked = rate_turn((0, 0), limit, tokens=1, now_us=0, max_wait_us=0)
    assert (first.granted, booked) == (True, (MINUTE_US, 0))
    refused, after = rate_turn(booked, limit, tokens=1, now_us=SECOND_US, max_wait_us=5 * SECOND_US)
    assert (refused.granted, refused.wait_us, after) == (False, 59 * SECOND_US, booked)


@given(
    rpm=st.integers(1, 600),
    tpm=st.integers(1_000, 100_000),
    burst_s=st.integers(0, 10),
    calls=st.lists(st.tuples(st.integers(0, 2 * MINUTE_US), st.integers(1, 1_000)), min_size=1, max_size=80),
)
def test_no_minute_holds_more_than_the_limit_and_its_burst(
    rpm: int, tpm: int, burst_s: int, calls: list[tuple[int, int]]
) -> None:
    limit = RateLimit(requests_per_minute=rpm, tokens_per_minute=tpm, burst_us=burst_s * SECOND_US)
    at, timed = 0, []
    for gap, tokens in calls:
        at += gap
        timed.append((at, tokens))
    starts = [(now + wait, tokens) for (now, tokens), wait in zip(timed, turns(limit, timed), strict=True)]
    for window_start, _ in starts:
        inside = [tokens for start, tokens in starts if window_start <= start < window_start + MINUTE_US]
        share = (60 + burst_s) / 60
        assert len(inside) <= rpm * share + 1
        assert sum(inside) <= tpm * share + 1_000


async def test_gateways_sharing_a_store_share_a_providers_schedule(
    tmp_path: Path, database_url: str | None
) -> None:
    limit = RateLimit(requests_per_minute=2, tokens_per_minute=0, burst_us=0)
    one, other = backend_store(tmp_path, database_url), backend_store(tmp_path, database_url)
    await one.open()
    await other.open()
    try:
        now = int(time.time() * 1e6)
        first = await one.take_rate_turn("local", limit, tokens=1, now_us=now, max_wait_us=0)
        refused = await other.take_rate_turn("local", limit, tokens=1, now_us=now, max_wait_us=SECOND_US)
        waited = await other.take_rate_turn("local", limit, tokens=1, now_us=now, max_wait_us=MINUTE_US)
        unlimited_elsewhere = await one.take_rate_turn("vllm", limit, tokens=1, now_us=now, max_wait_us=0)
    finally:
        await one.close()
        await other.close()
    assert (first.granted, first.wait_us) == (True, 0)
    assert (refused.granted, refused.wait_us) == (False, 30 * SECOND_US)
    assert (waited.granted, waited.wait_us) == (True, 30 * SECOND_US)
    assert (unlimited_elsewhere.granted, unlimited_elsewhere.wait_us) == (True, 0)


@pytest.fixture(autouse=True)
def claude_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's Claude provider reads its key from this variable (the fake takes any)."""
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def limited(local: FakeOpenAI, **limits: float) -> tuple[dict[str, ProviderConfig], object]:
    """The providers table with the local server limited (strict pacing unless a burst is given)."""
    providers, routing = targets(local.base_url)
    providers["local"] = providers["local"].model_copy(update={"rate_burst_seconds": 0, **limits})
    return providers, routing


async def limited_gateway(
    folder: Path, database_url: str | None, local: FakeOpenAI, **limits: float
) -> tuple[GatewayHarness, int]:
    """A gateway on the table with the local server limited, and the port its metrics are served on."""
    providers, routing = limited(local, **limits)
    [metrics_port] = free_ports(1)
    settings = gateway_settings(
        folder, database_url, providers=providers, routing=routing, metrics_port=metrics_port
    )
    return await start_gateway(settings), metrics_port


async def rate_samples(port: int) -> dict[str, float]:
    samples = exposed_samples(await asyncio.to_thread(scrape, port))
    return {
        name: value
        for (name, labels), value in samples.items()
        if name.startswith("egbe_gateway_rate_limit") and dict(labels).get("provider") == "local"
    }


async def test_a_call_waits_for_its_turn_then_is_sent(
    tmp_path: Path, database_url: str | None, local: FakeOpenAI
) -> None:
    harness, metrics_port = await limited_gateway(tmp_path, database_url, local, requests_per_minute=120)
    try:
        started = time.monotonic()
        first = await harness.run("ada", tier=LACHESIS)
        second = await harness.run("bram", tier=LACHESIS)
        both = time.monotonic() - started
        samples = await rate_samples(metrics_port)
    finally:
        await harness.stop()
    completed = gateway_pb2.RUN_OUTCOME_COMPLETED
    assert (first.outcome, second.outcome) == (completed, completed)
    assert [sent["model"] for sent in local.completion_requests()] == [LOCAL_14B, LOCAL_14B]
    # 120 a minute, strictly paced: the second call's turn came half a second after the first's, which
    # it waited for less the first call's own time.
    assert both >= 0.5
    assert samples["egbe_gateway_rate_limit_waits_total"] == 1
    assert 0 < samples["egbe_gateway_rate_limit_wait_seconds_total"] <= 0.5
    assert "egbe_gateway_rate_limit_deferred_total" not in samples


async def runs_with_a_deadline(harness: GatewayHarness) -> tuple[gateway_pb2.RunResponse, ...]:
    """Two fused runs at Lachesis, the second with a 3 s deadline."""
    first = await harness.run("ada", tier=LACHESIS)
    second: gateway_pb2.RunResponse = await harness.gateway.Run(
        run_request("bram", tier=LACHESIS), metadata=harness.metadata(Role.SERVICE), timeout=3
    )
    return first, second


async def test_a_call_with_no_turn_before_its_deadline_is_deferred_never_sent(
    tmp_path: Path, database_url: str | None, local: FakeOpenAI
) -> None:
    harness, metrics_port = await limited_gateway(tmp_path, database_url, local, requests_per_minute=1)
    try:
        first, deferred = await runs_with_a_deadline(harness)
        [record] = await harness.audit_records(run_id=deferred.admission.run_id)
        spend = await harness.spend()
        samples = await rate_samples(metrics_port)
        ended = exposed_samples(await asyncio.to_thread(scrape, metrics_port))
    finally:
        await harness.stop()
    assert first.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
    assert deferred.outcome == gateway_pb2.RUN_OUTCOME_DEFERRED_BY_RATE_LIMIT
    assert deferred.detail.startswith("deferred: local's rate limit has no turn for the call before its")
    assert [sent["model"] for sent in local.completion_requests()] == [LOCAL_14B]
    # Audited as a call that got no answer and cost nothing; its run's reservation released.
    assert (record.error_class, record.usage.input_tokens, record.cost.micro_usd) == ("deferred", 0, 0)
    assert json_format.MessageToDict(record.input_context)["providers_tried"] == [
        {"provider": "local", "model_id": LOCAL_14B, "attempts": 0.0, "error_class": "deferred"}
    ]
    assert (spend.reserved_tokens, spend.consumed_tokens) == (
        0,
        first.generation.usage.input_tokens + first.generation.usage.output_tokens,
    )
    assert samples == {"egbe_gateway_rate_limit_deferred_total": 1}
    assert ended[("egbe_gateway_runs_ended_total", (("status", "deferred"),))] == 1
    assert ("egbe_gateway_runs_ended_total", (("status", "failed"),)) not in ended


async def test_a_deferred_call_falls_back_to_the_next_provider_of_its_route(
    tmp_path: Path,
    database_url: str | None,
    local: FakeOpenAI,
    fake: FakeAnthropic,
) -> None:
    providers, routing = fallback_route(local.base_url)
    providers["local"] = providers["local"].model_copy(
        update={"requests_per_minute": 1, "rate_burst_seconds": 0}
    )
    harness = await start_gateway(
        gateway_settings(tmp_path, database_url, providers=providers, routing=routing)
    )
    try:
        first, second = await runs_with_a_deadline(harness)
        [record] = await harness.audit_records(run_id=second.admission.run_id)
    finally:
        await harness.stop()
    assert (first.generation.model_ref, second.generation.model_ref) == (
        f"local:{LOCAL_14B}",
        "claude:claude-haiku-4-5",
    )
    assert [sent["model"] for sent in local.completion_requests()] == [LOCAL_14B]
    assert [sent["model"] for sent in fake.message_requests()] == ["claude-haiku-4-5"]
    assert json_format.MessageToDict(record.input_context)["providers_tried"] == [
        {"provider": "local", "model_id": LOCAL_14B, "attempts": 0.0, "error_class": "deferred"},
        {"provider": "claude", "model_id": "claude-haiku-4-5", "attempts": 1.0, "error_class": ""},
    ]


async def test_a_second_gateway_on_the_store_waits_for_the_first_ones_bookings(
    tmp_path: Path, postgres_dsn: str, local: FakeOpenAI
) -> None:
    providers, routing = limited(local, requests_per_minute=1)
    gateways = [
        await start_gateway(
            gateway_settings(
                tmp_path / holder,
                postgres_dsn,
                providers=providers,
                routing=routing,
                lease=LeaseConfig(holder=holder),
            )
        )
        for holder in ("gateway-a", "gateway-b")
    ]
    try:
        first = await gateways[0].run("ada", tier=LACHESIS)
        second = await gateways[1].gateway.Run(
            run_request("bram", tier=LACHESIS), metadata=gateways[1].metadata(Role.SERVICE), timeout=3
        )
    finally:
        for harness in gateways:
            await harness.stop()
    assert first.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
    assert second.outcome == gateway_pb2.RUN_OUTCOME_DEFERRED_BY_RATE_LIMIT
    assert len(local.completion_requests()) == 1
