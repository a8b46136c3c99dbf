"""The Anthropic adapter with the real SDK over real HTTP against a local fake of the Messages API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.adapters.anthropic import AnthropicAdapter
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.config import AnthropicConfig, GatewayConfig
from gateway.provider_errors import ProviderError, ProviderErrorClass
from tests.gateway.fake_anthropic import FakeAnthropic, Scripted, error_body
from tests.gateway.fake_http import record_waits

REQUEST = ModelRequest(
    system_policy="You are Ada. Stay in character.",
    task_instruction="Answer Bram.",
    untrusted=(UntrustedPart("RECALLED_MEMORY", "[mem-7] flour"),),
    max_output_tokens=256,
    model_class="sonnet-class",
    concrete_model_id="claude-sonnet-4-6",
    request_id="psyche:ada:dialogue:abc",
)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def adapter_for(fake: FakeAnthropic, **anthropic: object) -> tuple[AnthropicAdapter, list[float]]:
    config = GatewayConfig(anthropic=AnthropicConfig(**anthropic))  # type: ignore[arg-type]
    adapter = AnthropicAdapter(config, base_url=fake.base_url, api_key="sk-test-not-a-real-key")
    return adapter, record_waits(adapter)


async def test_a_reply_carries_usage_and_the_stable_system_block_is_cached(fake: FakeAnthropic) -> None:
    adapter, _ = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert not reply.offline
    assert reply.text.startswith('{"utterance"')
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.provider_attempts) == (120, 40, 1)
    [sent] = fake.message_requests()
    assert sent["model"] == "claude-sonnet-4-6"
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert '<untrusted kind="RECALLED_MEMORY">' in sent["messages"][0]["content"]


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (429, error_body("rate_limit_error", "slow down"), ProviderErrorClass.RATE_LIMIT),
        (529, error_body("overloaded_error", "Overloaded"), ProviderErrorClass.OVERLOADED),
        (500, error_body("api_error", "boom"), ProviderErrorClass.API_ERROR),
    ],
)
async def test_transient_errors_are_retried_honouring_retry_after(
    fake: FakeAnthropic, status: int, body: dict[str, object], expected: ProviderErrorClass
) -> None:
    fake.script.append(Scripted(status, body, {"retry-after": "2"}))
    adapter, waits = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert reply.provider_attempts == 2
    assert reply.retried_errors == (expected.value,)
    assert waits == [2.0]
    assert len(fake.message_requests()) == 2


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, error_body("authentication_error", "bad key"), ProviderErrorClass.AUTHENTICATION),
        (403, error_body("permission_error", "no"), ProviderErrorClass.PERMISSION),
        (400, error_body("invalid_request_error", "bad field"), ProviderErrorClass.INVALID_REQUEST),
        (413, error_body("request_too_large", "too big"), ProviderErrorClass.REQUEST_TOO_LARGE),
        (
            429,
            error_body("rate_limit_error", "spend limit reached", "enforced_spend_limit_reached"),
            ProviderErrorClass.BILLING,
        ),
        (
            400,
            error_body("invalid_request_error", "Your credit balance is too low"),
            ProviderErrorClass.BILLING,
        ),
    ],
)
async def test_terminal_errors_are_never_retried(
    fake: FakeAnthropic, status: int, body: dict[str, object], expected: ProviderErrorClass
) -> None:
    fake.script.append(Scripted(status, body, {"retry-after": "1"}))
    adapter, waits = adapter_for(fake)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert failed.value.error_class is expected
    assert failed.value.status == status
    assert waits == []
    assert len(fake.message_requests()) == 1


async def test_transient_errors_give_up_after_max_attempts_with_jittered_backoff(fake: FakeAnthropic) -> None:
    fake.script.extend(Scripted(529, error_body("overloaded_error", "Overloaded")) for _ in range(3))
    adapter, waits = adapter_for(fake, max_attempts=3, backoff_base_seconds=1.0)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert failed.value.error_class is ProviderErrorClass.OVERLOADED
    assert failed.value.attempts == 3
    assert len(waits) == 2
    assert 0 <= waits[0] <= 1.0
    assert 0 <= waits[1] <= 2.0


async def test_a_timeout_is_classified_and_retried(fake: FakeAnthropic) -> None:
    fake.script.append(Scripted(delay_seconds=1.0))
    adapter, _ = adapter_for(fake, request_timeout_seconds=0.2)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert reply.retried_errors == ("timeout",)


async def test_an_unreachable_api_is_a_network_error(fake: FakeAnthropic) -> None:
    fake.stop()
    adapter, _ = adapter_for(fake, max_attempts=2)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert failed.value.error_class is ProviderErrorClass.NETWORK


async def test_input_tokens_come_from_count_tokens(fake: FakeAnthropic) -> None:
    adapter, _ = adapter_for(fake)
    assert await adapter.count_input_tokens(REQUEST) == 321
    await adapter.close()


async def test_deferrable_work_goes_through_message_batches(fake: FakeAnthropic) -> None:
    fake.batch_polls_before_end = 2
    adapter, waits = adapter_for(fake, batches_enabled=True, batch_poll_seconds=0.01)
    reply = await adapter.generate(ModelRequest(**{**vars(REQUEST), "deferrable": True}))
    await adapter.close()
    assert reply.batched
    assert reply.usage.output_tokens == 40
    assert fake.message_requests() == []
    assert [p for m, p, _ in fake.requests if m == "POST"] == ["/v1/messages/batches"]
    assert len(waits) == 2
