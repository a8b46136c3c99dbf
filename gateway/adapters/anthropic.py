"""The Anthropic adapter on the official async SDK: prompt caching, batches, counts.

The SDK's own retries are off (`max_retries=0`): every attempt goes through the one retry loop
(`retry_loop.py`), classified by `http_errors.py`, so a spend-limit 429 or any other 4xx is never retried
and no attempt outlasts the caller's deadline.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import anthropic

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.adapters.http_errors import classify_status
from gateway.adapters.retry_loop import with_retries
from gateway.config import GatewayConfig, RetryPolicy
from gateway.cost import Usage, estimate_tokens
from gateway.provider_errors import ProviderError, ProviderErrorClass
from services.logging import get_logger

log = get_logger(__name__)
ANTHROPIC_MODEL_REF = "anthropic"


def _error_details(error: anthropic.APIStatusError) -> str:
    """The error type, code and message the API sent, lowercased, for spend-limit detection."""
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    found = body.get("error", body)
    inner: dict[str, Any] = found if isinstance(found, dict) else {}
    found = inner.get("details")
    details: dict[str, Any] = found if isinstance(found, dict) else {}
    parts = [str(inner.get("type", "")), str(details.get("error_code", "")), str(inner.get("message", ""))]
    return " ".join(parts).lower()


def classify(error: Exception) -> ProviderError:
    """One provider failure as a class: what the status, body and exception type say it is."""
    if isinstance(error, anthropic.APITimeoutError):
        return ProviderError(ProviderErrorClass.TIMEOUT, str(error))
    if isinstance(error, anthropic.APIConnectionError):
        return ProviderError(ProviderErrorClass.NETWORK, str(error))
    if isinstance(error, anthropic.APIStatusError):
        return classify_status(
            error.status_code, _error_details(error), error.message, error.response.headers
        )
    return ProviderError(ProviderErrorClass.UNKNOWN, repr(error))


class AnthropicAdapter:
    """Claude through the official SDK; credentials come from ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)."""

    name = ANTHROPIC_MODEL_REF
    offline = False

    def __init__(
        self,
        config: GatewayConfig,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        """`retry`: a provider's own timeout and retry settings, in place of `config.anthropic`'s."""
        self._config = config.anthropic
        self._retry: RetryPolicy = retry or self._config
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or os.environ.get("ANTHROPIC_API_KEY"),
            base_url=base_url,
            max_retries=0,
            timeout=self._retry.request_timeout_seconds,
        )
        self._sleep = asyncio.sleep

    def _system(self, request: ModelRequest) -> list[dict[str, Any]]:
        stable: dict[str, Any] = {"type": "text", "text": request.system_policy or "You are an Ori."}
        if self._config.prompt_caching:
            # The policy block is the same across an Ori's calls: cache it, keep the varying parts after it.
            stable["cache_control"] = {"type": "ephemeral"}
        blocks = [stable]
        if request.tool_grants:
            blocks.append({"type": "text", "text": request.tools_text()})
        return blocks

    @staticmethod
    def _messages(request: ModelRequest) -> list[dict[str, Any]]:
        return [{"role": "user", "content": request.user_text()}]

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """Exact count from the count-tokens endpoint when reachable; the len/4 estimate otherwise."""
        if not self._config.count_tokens:
            return estimate_tokens(request.prompt_text())
        try:
            counted = await self._client.messages.count_tokens(
                model=request.concrete_model_id,
                system=self._system(request),  # type: ignore[arg-type]
                messages=self._messages(request),  # type: ignore[arg-type]
            )
        except anthropic.AnthropicError as error:
            log.warning("count-tokens unavailable; using the len/4 estimate", error=str(error))
            return estimate_tokens(request.prompt_text())
        return int(counted.input_tokens)

    async def generate(self, request: ModelRequest) -> ModelReply:
        call = self._batched if request.deferrable and self._config.batches_enabled else self._create
        return await with_retries(
            self._retry,
            request,
            call,
            provider_errors=anthropic.AnthropicError,
            classify=classify,
            sleep=self._sleep,
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        return {
            "model": request.concrete_model_id,
            "max_tokens": max(1, request.max_output_tokens),
            "system": self._system(request),
            "messages": self._messages(request),
        }

    @staticmethod
    def _reply(message: Any, *, batched: bool) -> ModelReply:
        text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        usage = message.usage
        return ModelReply(
            text=text,
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
            ),
            offline=False,
            batched=batched,
        )

    async def _create(self, request: ModelRequest, seconds: float) -> ModelReply:
        message = await self._client.messages.create(**self._params(request), timeout=seconds)
        return self._reply(message, batched=False)

    async def _batched(self, request: ModelRequest, seconds: float) -> ModelReply:
        """Deferrable Atropos work through Message Batches (half price): submit, poll until ended (or the
        caller's deadline), read."""
        custom_id = (request.request_id or uuid.uuid4().hex).replace(":", "_")[:64]
        batch = await self._client.messages.batches.create(
            requests=[{"custom_id": custom_id, "params": self._params(request)}],  # type: ignore[typeddict-item]
            timeout=seconds,
        )
        deadline = time.monotonic() + self._config.batch_max_wait_seconds
        if request.deadline is not None:
            deadline = min(deadline, request.deadline)
        while batch.processing_status != "ended":
            if time.monotonic() > deadline:
                await self._client.messages.batches.cancel(batch.id)
                raise ProviderError(ProviderErrorClass.TIMEOUT, f"batch {batch.id} did not end in time")
            await self._sleep(self._config.batch_poll_seconds)
            batch = await self._client.messages.batches.retrieve(batch.id)
        async for item in await self._client.messages.batches.results(batch.id):
            if item.custom_id != custom_id:
                continue
            if item.result.type == "succeeded":
                return self._reply(item.result.message, batched=True)
            raise ProviderError(ProviderErrorClass.API_ERROR, f"batch request {item.result.type}")
        raise ProviderError(ProviderErrorClass.API_ERROR, f"batch {batch.id} returned no result")

    async def close(self) -> None:
        await self._client.close()
