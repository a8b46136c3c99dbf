"""The one retry loop every provider adapter runs its attempts through (the SDKs' own retries are off).

Each attempt is classified (`ProviderError`) and counted here, so a spend limit or any other 4xx is never
retried and every retry shows in the reply's `retried_errors`. The caller's deadline
(`ModelRequest.deadline`) bounds each attempt and the loop: no attempt outlasts it, and no retry starts
that could not end before it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.config import RetryPolicy
from gateway.provider_errors import ProviderError, ProviderErrorClass
from services.logging import get_logger

log = get_logger(__name__)

# One attempt: the request and the seconds it may take.
Attempt = Callable[[ModelRequest, float], Awaitable[ModelReply]]
Sleep = Callable[[float], Awaitable[None]]


def attempt_timeout(settings: RetryPolicy, request: ModelRequest) -> float:
    """Seconds the next attempt may take: the configured request timeout, or less when the caller's
    deadline is sooner (0 or below: it has passed)."""
    timeout = settings.request_timeout_seconds
    if request.deadline is None:
        return timeout
    return min(timeout, request.deadline - time.monotonic())


def backoff(settings: RetryPolicy, attempt: int, retry_after: float | None) -> float | None:
    """Seconds to wait before the next attempt (full jitter, or the server's retry-after), or None when
    the server asks for longer than we allow."""
    ceiling = settings.backoff_max_seconds
    if retry_after is not None:
        return retry_after if retry_after <= ceiling else None
    return random.uniform(0, min(ceiling, settings.backoff_base_seconds * 2 ** (attempt - 1)))  # noqa: S311


async def with_retries(
    settings: RetryPolicy,
    request: ModelRequest,
    call: Attempt,
    *,
    provider_errors: type[Exception],
    classify: Callable[[Exception], ProviderError],
    sleep: Sleep,
) -> ModelReply:
    """Run `call` until it answers: transient classes back off (honouring retry-after); others end, as
    does a transient one on the last attempt or whose wait would reach the caller's deadline.

    `provider_errors` is the SDK's base exception; `classify` turns one into its class."""
    retried: list[str] = []
    for attempt in range(1, settings.max_attempts + 1):
        timeout = attempt_timeout(settings, request)
        if timeout <= 0:
            raise ProviderError(
                ProviderErrorClass.TIMEOUT, "the caller's deadline passed", attempts=attempt - 1
            )
        try:
            reply = await call(request, timeout)
        except provider_errors as raw:
            error = classify(raw)
            error.attempts = attempt
            wait = backoff(settings, attempt, error.retry_after_seconds)
            last = attempt == settings.max_attempts
            can_wait = wait is not None and (
                request.deadline is None or time.monotonic() + wait < request.deadline
            )
            if not error.transient or last or wait is None or not can_wait:
                raise error from raw
            retried.append(error.error_class.value)
            log.info("provider error; retrying", error_class=error.error_class.value, wait_seconds=wait)
            await sleep(wait)
            continue
        return replace(reply, provider_attempts=attempt, retried_errors=tuple(retried))
    raise AssertionError("unreachable: the loop returns or raises on its last attempt")
