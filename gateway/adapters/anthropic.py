"""The Anthropic adapter on the official async SDK: one retry loop of ours, prompt caching, batches, counts.

The SDK's own retries are off (`max_retries=0`) so every attempt is classified and counted here, and a
spend-limit 429 or any other 4xx is never retried. The caller's deadline (`ModelRequest.deadline`) bounds
each attempt and the loop: no attempt outlasts it, and no retry starts that could not end before it.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any

import anthropic

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.config import GatewayConfig
from gateway.cost import Usage, estimate_tokens
from gateway.provider_errors import ProviderError, ProviderErrorClass
from services.logging import get_logger

log = get_logger(__name__)
ANTHROPIC_MODEL_REF = "anthropic"
_SPEND_LIMIT_MARKERS = ("spend_limit", "spend limit", "credit balance", "billing")
_STATUS_CLASSES = {
    401: ProviderErrorClass.AUTHENTICATION,
    402: ProviderErrorClass.BILLING,
    403: ProviderErrorClass.PERMISSION,
    404: ProviderErrorClass.NOT_FOUND,
    413: ProviderErrorClass.REQUEST_TOO_LARGE,
    429: ProviderErrorClass.RATE_LIMIT,
    529: ProviderErrorClass.OVERLOADED,
}


def _error_details(error: anthropic.APIStatusError) -> str:
    """The error type, code and message the API sent, lowercased, for spend-limit detection."""
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    found = body.get("error", body)
    inner: dict[str, Any] = found if isinstance(found, dict) else {}
    found = inner.get("details")
    details: dict[str, Any] = found if isinstance(found, dict) else {}
    parts = [str(inner.get("type", "")), str(details.get("error_code", "")), str(inner.get("message", ""))]
    return " ".join(parts).lower()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, else retry-after in seconds)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def classify(error: Exception) -> ProviderError:
    """One provider failure as a class: what the status, body and exception type say it is."""
    if isinstance(error, anthropic.APITimeoutError):
        return ProviderError(ProviderErrorClass.TIMEOUT, str(error))
    if isinstance(error, anthropic.APIConnectionError):
        return ProviderError(ProviderErrorClass.NETWORK, str(error))
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        details = _error_details(error)
        if status in {400, 429} and any(marker in details for marker in _SPEND_LIMIT_MARKERS):
            error_class = ProviderErrorClass.BILLING
        elif status in _STATUS_CLASSES:
            error_class = _STATUS_CLASSES[status]
        elif status >= 500:
            error_class = ProviderErrorClass.API_ERROR
        elif status in {400, 422}:
            error_class = ProviderErrorClass.INVALID_REQUEST
        else:
            error_class = ProviderErrorClass.UNKNOWN
        return ProviderError(
            error_class,
            error.message,
            status=status,
            retry_after_seconds=_retry_after(error.response.headers),
        )
    return ProviderError(ProviderErrorClass.UNKNOWN, repr(error))


class AnthropicAdapter:
    """Claude through the official SDK; credentials come from ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)."""

    name = ANTHROPIC_MODEL_REF
    offline = False

    def __init__(
        self, config: GatewayConfig, *, base_url: str | None = None, api_key: str | None = None
    ) -> None:
        self._config = config.anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or os.environ.get("ANTHROPIC_API_KEY"),
            base_url=base_url,
            max_retries=0,
            timeout=self._config.request_timeout_seconds,
        )
        self._sleep = asyncio.sleep

    def _system(self, request: ModelRequest) -> list[dict[str, Any]]:
        stable: dict[str, Any] = {"type": "text", "text": request.system_policy or "You are an Ori."}
        if self._config.prompt_caching:
            # The policy block is the same across an Ori's calls: cache it, keep the varying parts after it.
            stable["cache_control"] = {"type": "ephemeral"}
        blocks = [stable]
        if request.tool_grants:
            blocks.append({"type": "text", "text": "Tools granted:\n" + "\n".join(request.tool_grants)})
        return blocks

    @staticmethod
    def _messages(request: ModelRequest) -> list[dict[str, Any]]:
        zones = "\n\n".join(
            f'<untrusted kind="{p.kind}">\n{p.content}\n</untrusted>' for p in request.untrusted
        )
        text = request.task_instruction + (f"\n\n{zones}" if zones else "")
        return [{"role": "user", "content": text or "(empty)"}]

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
        if request.deferrable and self._config.batches_enabled:
            return await self._with_retries(request, self._batched)
        return await self._with_retries(request, self._create)

    def _timeout(self, request: ModelRequest) -> float:
        """Seconds the next attempt may take: the configured request timeout, or less when the caller's
        deadline is sooner (0 or below: it has passed)."""
        timeout = self._config.request_timeout_seconds
        if request.deadline is None:
            return timeout
        return min(timeout, request.deadline - time.monotonic())

    @staticmethod
    def _can_wait(request: ModelRequest, wait: float) -> bool:
        """Whether a retry after `wait` seconds would still start before the caller's deadline."""
        return request.deadline is None or time.monotonic() + wait < request.deadline

    async def _with_retries(self, request: ModelRequest, call: Any) -> ModelReply:
        """Our one retry loop: transient classes back off (full jitter, honouring retry-after); others end,
        as does a transient one whose wait would reach the caller's deadline."""
        retried: list[str] = []
        for attempt in range(1, self._config.max_attempts + 1):
            timeout = self._timeout(request)
            if timeout <= 0:
                raise ProviderError(
                    ProviderErrorClass.TIMEOUT, "the caller's deadline passed", attempts=attempt - 1
                )
            try:
                reply: ModelReply = await call(request, timeout)
            except anthropic.AnthropicError as raw:
                error = classify(raw)
                error.attempts = attempt
                wait = self._backoff(attempt, error.retry_after_seconds)
                last = attempt == self._config.max_attempts
                if not error.transient or last or wait is None or not self._can_wait(request, wait):
                    raise error from raw
                retried.append(error.error_class.value)
                log.info("provider error; retrying", error_class=error.error_class.value, wait_seconds=wait)
                await self._sleep(wait)
                continue
            return ModelReply(
                text=reply.text,
                usage=reply.usage,
                offline=False,
                provider_attempts=attempt,
                batched=reply.batched,
                retried_errors=tuple(retried),
            )
        raise AssertionError("unreachable: the loop returns or raises on its last attempt")

    def _backoff(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when the server asks for longer than we allow."""
        ceiling = self._config.backoff_max_seconds
        if retry_after is not None:
            return retry_after if retry_after <= ceiling else None
        return random.uniform(0, min(ceiling, self._config.backoff_base_seconds * 2 ** (attempt - 1)))  # noqa: S311

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
