"""The caller's deadline bounds the provider: no attempt outlasts it and no retry starts past it (the
real SDK over HTTP against the fake Messages API)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator

import pytest

from gateway.adapters.anthropic import AnthropicAdapter
from gateway.adapters.base import ModelRequest
from gateway.config import AnthropicConfig, GatewayConfig
from gateway.provider_errors import ProviderError, ProviderErrorClass
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic, Scripted, error_body

REQUEST = ModelRequest(
    system_policy="You are Ada.",
    task_instruction="Answer Bram.",
    max_output_tokens=64,
    concrete_model_id="claude-sonnet-4-6",
)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def _adapter(fake: FakeAnthropic) -> AnthropicAdapter:
    """Four attempts of 60 s each, as configured by default."""
    config = GatewayConfig(anthropic=AnthropicConfig(max_attempts=4, backoff_base_seconds=0.01))
    return AnthropicAdapter(config, base_url=fake.base_url, api_key="sk-test-not-a-real-key")


def _due_in(seconds: float) -> ModelRequest:
    return dataclasses.replace(REQUEST, deadline=time.monotonic() + seconds)


async def test_an_attempt_ends_at_the_callers_deadline(fake: FakeAnthropic) -> None:
    fake.default_delay_seconds = SLOW_MODEL_SECONDS
    adapter = _adapter(fake)
    try:
        with pytest.raises(ProviderError) as timed_out:
            # Without the deadline the attempt would wait for the model (30 s) and this would time out.
            await asyncio.wait_for(adapter.generate(_due_in(0.5)), SLOW_MODEL_SECONDS / 2)
    finally:
        await adapter.close()
    assert timed_out.value.error_class is ProviderErrorClass.TIMEOUT
    assert len(fake.message_requests()) == 1


async def test_no_retry_starts_past_the_callers_deadline(fake: FakeAnthropic) -> None:
    for _ in range(2):
        fake.script.append(Scripted(429, error_body("rate_limit_error", "slow down"), {"retry-after": "2"}))
    adapter = _adapter(fake)
    waits: list[float] = []

    async def record_wait(seconds: float) -> None:
        waits.append(seconds)

    adapter._sleep = record_wait  # type: ignore[assignment]
    try:
        with pytest.raises(ProviderError) as refused:
            await adapter.generate(_due_in(1.0))
        answered = await adapter.generate(_due_in(10.0))  # a deadline that holds the wait: retried
    finally:
        await adapter.close()
    assert (refused.value.error_class, refused.value.attempts) == (ProviderErrorClass.RATE_LIMIT, 1)
    assert (answered.provider_attempts, waits) == (2, [2.0])
    assert len(fake.message_requests()) == 3
