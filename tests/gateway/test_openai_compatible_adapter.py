"""The OpenAI-compatible adapter with the real SDK over real HTTP against a local fake of
/v1/chat/completions."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import REPLY_SCHEMAS
from gateway.adapters.openai_compatible import OpenAICompatibleAdapter
from gateway.config import ProviderConfig
from gateway.cost import estimate_tokens
from gateway.provider_errors import ProviderError, ProviderErrorClass
from tests.gateway.fake_anthropic import Scripted
from tests.gateway.fake_http import record_waits
from tests.gateway.fake_openai import COMPLETION_TOKENS, PROMPT_TOKENS, FakeOpenAI, error_body

REQUEST = ModelRequest(
    system_policy="You are Ada. Stay in character.",
    task_instruction="Answer Bram.",
    tool_grants=("biography.recall",),
    untrusted=(UntrustedPart("RECALLED_MEMORY", "[mem-7] flour"),),
    mode="dialogue",
    max_output_tokens=256,
    model_class="sonnet-class",
    concrete_model_id="qwen2.5:7b-instruct",
    request_id="psyche:ada:dialogue:abc",
)
REPLY = '{"utterance":"hi","addressed_to":"Bram","emotion":"warm"}'


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(REPLY).start()
    yield server
    server.stop()


def adapter_for(fake: FakeOpenAI, **provider: object) -> tuple[OpenAICompatibleAdapter, list[float]]:
    config = ProviderConfig(kind="openai-compatible", base_url=fake.base_url, **provider)  # type: ignore[arg-type]
    adapter = OpenAICompatibleAdapter("local-vllm", config, api_key="sk-test-not-a-real-key")
    return adapter, record_waits(adapter)


async def test_the_server_gets_the_model_the_prompt_and_the_modes_json_schema(fake: FakeOpenAI) -> None:
    adapter, _ = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    [(path, sent, headers)] = fake.requests
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer sk-test-not-a-real-key"
    assert sent["model"] == "qwen2.5:7b-instruct"
    assert sent["max_tokens"] == 256
    assert sent["messages"] == [
        {
            "role": "system",
            "content": "You are Ada. Stay in character.\n\nTools granted:\nbiography.recall",
        },
        {
            "role": "user",
            "content": 'Answer Bram.\n\n<untrusted kind="RECALLED_MEMORY">\n[mem-7] flour\n</untrusted>',
        },
    ]
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "egbe_cognition_dialogue_v1",
            "schema": REPLY_SCHEMAS["egbe.cognition.dialogue.v1"].schema,
            "strict": False,
        },
    }
    assert (reply.text, reply.offline, reply.provider_attempts, reply.usage_estimated) == (
        REPLY,
        False,
        1,
        False,
    )
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)


async def test_the_output_schema_named_by_the_request_wins_over_its_mode(fake: FakeOpenAI) -> None:
    adapter, _ = adapter_for(fake, strict_schema=True)
    await adapter.generate(ModelRequest(**{**vars(REQUEST), "output_schema": "egbe.cognition.summary.v1"}))
    await adapter.close()
    [sent] = fake.completion_requests()
    schema = sent["response_format"]["json_schema"]
    assert (schema["name"], schema["strict"]) == ("egbe_cognition_summary_v1", True)
    assert schema["schema"] == REPLY_SCHEMAS["egbe.cognition.summary.v1"].schema


async def test_the_output_cap_goes_in_the_field_the_provider_takes(fake: FakeOpenAI) -> None:
    adapter, _ = adapter_for(fake, output_limit_field="max_completion_tokens")
    await adapter.generate(REQUEST)
    await adapter.close()
    [sent] = fake.completion_requests()
    assert (sent["max_completion_tokens"], "max_tokens" in sent) == (256, False)


async def test_cached_prompt_tokens_are_billed_as_cache_reads(fake: FakeOpenAI) -> None:
    fake.cached_tokens = 100
    adapter, _ = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert (reply.usage.input_tokens, reply.usage.cache_read_tokens) == (PROMPT_TOKENS - 100, 100)


async def test_a_server_without_schema_support_refuses_json_schema_and_is_never_retried() -> None:
    fake = FakeOpenAI(REPLY, schema_support=False).start()
    adapter, waits = adapter_for(fake)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    fake.stop()
    assert (failed.value.error_class, failed.value.status) == (ProviderErrorClass.INVALID_REQUEST, 400)
    assert (waits, len(fake.completion_requests())) == ([], 1)


async def test_json_object_mode_serves_a_server_without_schema_support() -> None:
    fake = FakeOpenAI(REPLY, schema_support=False).start()
    adapter, _ = adapter_for(fake, structured_output="json_object")
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    fake.stop()
    [sent] = fake.completion_requests()
    assert sent["response_format"] == {"type": "json_object"}
    assert reply.text == REPLY


async def test_a_server_that_reports_no_usage_gets_a_labelled_estimate() -> None:
    fake = FakeOpenAI(REPLY, report_usage=False).start()
    adapter, _ = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    fake.stop()
    assert reply.usage_estimated
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (
        estimate_tokens(REQUEST.prompt_text()),
        estimate_tokens(REPLY),
    )


RATE_LIMITED = error_body("slow down", "rate_limit_error")


@pytest.mark.parametrize(
    ("answer", "expected", "wait"),
    [
        (Scripted(429, RATE_LIMITED, {"retry-after": "2"}), ProviderErrorClass.RATE_LIMIT, 2.0),
        (Scripted(429, RATE_LIMITED, {"retry-after-ms": "250"}), ProviderErrorClass.RATE_LIMIT, 0.25),
        (
            Scripted(500, error_body("boom", "server_error"), {"retry-after": "1"}),
            ProviderErrorClass.API_ERROR,
            1.0,
        ),
        (
            Scripted(503, error_body("engine overloaded", "server_error"), {"retry-after": "3"}),
            ProviderErrorClass.OVERLOADED,
            3.0,
        ),
        (
            Scripted(529, error_body("overloaded", "overloaded_error"), {"retry-after": "1"}),
            ProviderErrorClass.OVERLOADED,
            1.0,
        ),
    ],
)
async def test_transient_errors_are_retried_honouring_retry_after(
    fake: FakeOpenAI, answer: Scripted, expected: ProviderErrorClass, wait: float
) -> None:
    fake.script.append(answer)
    adapter, waits = adapter_for(fake)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert (reply.provider_attempts, reply.retried_errors, reply.text) == (2, (expected.value,), REPLY)
    assert waits == [wait]
    assert len(fake.completion_requests()) == 2


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, error_body("bad field"), ProviderErrorClass.INVALID_REQUEST),
        (401, error_body("bad key", "authentication_error"), ProviderErrorClass.AUTHENTICATION),
        (403, error_body("no", "permission_error"), ProviderErrorClass.PERMISSION),
        (404, error_body("model not found", "not_found_error"), ProviderErrorClass.NOT_FOUND),
        (413, error_body("too big"), ProviderErrorClass.REQUEST_TOO_LARGE),
        (422, error_body("unprocessable"), ProviderErrorClass.INVALID_REQUEST),
        (
            429,
            error_body("You exceeded your current quota", "insufficient_quota", "insufficient_quota"),
            ProviderErrorClass.BILLING,
        ),
    ],
)
async def test_terminal_errors_are_never_retried(
    fake: FakeOpenAI, status: int, body: dict[str, object], expected: ProviderErrorClass
) -> None:
    fake.script.append(Scripted(status, body, {"retry-after": "1"}))
    adapter, waits = adapter_for(fake)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert (failed.value.error_class, failed.value.status, failed.value.attempts) == (expected, status, 1)
    assert waits == []
    assert len(fake.completion_requests()) == 1


async def test_transient_errors_give_up_after_max_attempts_with_jittered_backoff(fake: FakeOpenAI) -> None:
    fake.script.extend(Scripted(503, error_body("overloaded", "server_error")) for _ in range(3))
    adapter, waits = adapter_for(fake, max_attempts=3, backoff_base_seconds=1.0)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert (failed.value.error_class, failed.value.attempts) == (ProviderErrorClass.OVERLOADED, 3)
    assert len(waits) == 2
    assert 0 <= waits[0] <= 1.0
    assert 0 <= waits[1] <= 2.0


async def test_a_retry_after_past_the_backoff_ceiling_ends_the_call(fake: FakeOpenAI) -> None:
    fake.script.append(Scripted(429, RATE_LIMITED, {"retry-after": "60"}))
    adapter, waits = adapter_for(fake, backoff_max_seconds=20.0)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert (failed.value.error_class, failed.value.retry_after_seconds) == (
        ProviderErrorClass.RATE_LIMIT,
        60.0,
    )
    assert (waits, len(fake.completion_requests())) == ([], 1)


async def test_no_retry_starts_that_could_not_end_before_the_callers_deadline(fake: FakeOpenAI) -> None:
    fake.script.append(Scripted(429, RATE_LIMITED, {"retry-after": "5"}))
    adapter, waits = adapter_for(fake)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(ModelRequest(**{**vars(REQUEST), "deadline": time.monotonic() + 2.0}))
    await adapter.close()
    assert failed.value.error_class is ProviderErrorClass.RATE_LIMIT
    assert (waits, len(fake.completion_requests())) == ([], 1)


async def test_a_timeout_is_classified_and_retried(fake: FakeOpenAI) -> None:
    fake.script.append(Scripted(delay_seconds=1.0))
    adapter, _ = adapter_for(fake, request_timeout_seconds=0.2)
    reply = await adapter.generate(REQUEST)
    await adapter.close()
    assert (reply.retried_errors, reply.provider_attempts) == (("timeout",), 2)


async def test_an_unreachable_server_is_a_network_error(fake: FakeOpenAI) -> None:
    fake.stop()
    adapter, waits = adapter_for(fake, max_attempts=2)
    with pytest.raises(ProviderError) as failed:
        await adapter.generate(REQUEST)
    await adapter.close()
    assert (failed.value.error_class, failed.value.attempts, len(waits)) == (ProviderErrorClass.NETWORK, 2, 1)


async def test_a_server_without_a_key_is_sent_a_placeholder(fake: FakeOpenAI) -> None:
    config = ProviderConfig(kind="openai-compatible", base_url=fake.base_url)
    adapter = OpenAICompatibleAdapter("ollama", config, api_key=None)
    await adapter.generate(REQUEST)
    await adapter.close()
    [(_, _, headers)] = fake.requests
    assert headers["authorization"] == "Bearer no-key"
    assert await adapter.count_input_tokens(REQUEST) == estimate_tokens(REQUEST.prompt_text())
