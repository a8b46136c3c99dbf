"""The OpenAI-compatible adapter on the official async SDK: any server speaking /v1/chat/completions.

vLLM, Ollama, llama.cpp's server, LM Studio and OpenAI itself. Structured output goes as `response_format`:
the mode's published JSON Schema (egbe/v1/schemas/) where the server supports it, else JSON mode, and the
cognition service validates every reply against the schema either way (re-asking with the error), as it
does for Anthropic's. Usage comes from the response; a server that reports none gets the len/4 estimate,
marked `usage_estimated` so the call's cost is labelled estimated. The SDK's retries are off: attempts
go through the one retry loop (`retry_loop.py`), classified as Anthropic's are (`http_errors.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.adapters.http_errors import classify_status
from gateway.adapters.offline import REPLY_SCHEMAS, schema_for
from gateway.adapters.retry_loop import with_retries
from gateway.config import ProviderConfig
from gateway.cost import Usage, estimate_tokens
from gateway.provider_errors import ProviderError, ProviderErrorClass

# Servers that check no key still need the SDK to send one.
NO_KEY = "no-key"


def _error_details(error: openai.APIStatusError) -> str:
    """The error type, code and message the server sent, lowercased, for spend-limit detection (the SDK
    has already unwrapped the body's "error" object)."""
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    return " ".join(str(body.get(key) or "") for key in ("type", "code", "message")).lower()


def classify(error: Exception) -> ProviderError:
    """One failed attempt as a class: what the status, body and exception type say it is."""
    if isinstance(error, openai.APITimeoutError):
        return ProviderError(ProviderErrorClass.TIMEOUT, str(error))
    if isinstance(error, openai.APIConnectionError):
        return ProviderError(ProviderErrorClass.NETWORK, str(error))
    if isinstance(error, openai.APIStatusError):
        return classify_status(
            error.status_code, _error_details(error), error.message, error.response.headers
        )
    return ProviderError(ProviderErrorClass.UNKNOWN, repr(error))


def response_format(provider: ProviderConfig, request: ModelRequest) -> ResponseFormat:
    """The mode's JSON Schema where the provider supports it, else JSON mode."""
    if provider.structured_output == "json_object":
        return {"type": "json_object"}
    schema = schema_for(request)
    return {
        "type": "json_schema",
        "json_schema": {
            # OpenAI allows [a-zA-Z0-9_-]{1,64}: "egbe.cognition.dialogue.v1" -> "egbe_cognition_dialogue_v1".
            "name": schema.replace(".", "_")[:64],
            "schema": dict(cast("Mapping[str, object]", REPLY_SCHEMAS[schema].schema)),
            "strict": provider.strict_schema,
        },
    }


class OpenAICompatibleAdapter:
    """One OpenAI-compatible server of the providers table; `name` is the provider's name there."""

    offline = False

    def __init__(self, name: str, provider: ProviderConfig, *, api_key: str | None) -> None:
        self.name = name
        self._provider = provider
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=provider.base_url,
            max_retries=0,
            timeout=provider.request_timeout_seconds,
        )
        self._sleep = asyncio.sleep

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """The len/4 estimate: the chat-completions API has no count endpoint."""
        return estimate_tokens(request.prompt_text())

    async def generate(self, request: ModelRequest) -> ModelReply:
        return await with_retries(
            self._provider,
            request,
            self._create,
            provider_errors=openai.APIError,
            classify=classify,
            sleep=self._sleep,
        )

    @staticmethod
    def _messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
        system = request.system_policy or "You are an Ori."
        if request.tool_grants:
            system += "\n\n" + request.tools_text()
        return [{"role": "system", "content": system}, {"role": "user", "content": request.user_text()}]

    async def _create(self, request: ModelRequest, seconds: float) -> ModelReply:
        limit: dict[str, Any] = {self._provider.output_limit_field: max(1, request.max_output_tokens)}
        completion = await self._client.chat.completions.create(
            model=request.concrete_model_id,
            messages=self._messages(request),
            response_format=response_format(self._provider, request),
            timeout=seconds,
            **limit,
        )
        if not completion.choices:
            raise ProviderError(ProviderErrorClass.API_ERROR, "the server answered no choice")
        text = completion.choices[0].message.content or ""
        usage = completion.usage
        if usage is None:
            estimate = Usage(
                input_tokens=estimate_tokens(request.prompt_text()), output_tokens=estimate_tokens(text)
            )
            return ModelReply(text=text, usage=estimate, offline=False, usage_estimated=True)
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        return ModelReply(
            text=text,
            usage=Usage(
                input_tokens=usage.prompt_tokens - cached,
                output_tokens=usage.completion_tokens,
                cache_read_tokens=cached,
            ),
            offline=False,
        )

    async def close(self) -> None:
        await self._client.close()
