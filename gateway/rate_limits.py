"""Providers' request and token rate limits, enforced before a call leaves the gateway.

A provider of the providers table with `requests_per_minute` or `tokens_per_minute` set has one schedule
in the store, shared by every gateway on it. Before a call is sent to it, the call books its turn: one
request, and its prompt's token estimate plus its output cap (what providers' own limiters count),
paced at the provider's limits with its burst (`store/rates.py`). A call whose turn is now leaves at
once; one whose turn comes before its deadline waits for it, the wait counting against that deadline;
one whose turn would come later books nothing and is deferred (`RateDeferred`), so the next provider of
its route may take it, and with none left the run ends deferred, never failed. Only a call's first
attempt on a provider is booked: the retry loop's retries follow the provider's own retry-after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from gateway.adapters.base import ModelRequest
from gateway.config import ProviderConfig
from gateway.cost import estimate_tokens
from gateway.metrics import GatewayMetrics
from gateway.provider_errors import ProviderError, ProviderErrorClass
from gateway.store.rates import RateLimit, RateStore


class RateDeferred(ProviderError):
    """The provider has no turn for the call before its deadline; nothing was sent or booked."""

    def __init__(self, provider: str, wait_us: int) -> None:
        super().__init__(
            ProviderErrorClass.DEFERRED,
            f"{provider}'s rate limit has no turn for the call before its deadline"
            f" (next turn in {wait_us / 1e6:.3f} s)",
            retry_after_seconds=wait_us / 1e6,
            attempts=0,
        )


class ProviderRates:
    """Books each call's turn on its provider's shared schedule, waiting for it or deferring the call."""

    def __init__(
        self,
        store: RateStore,
        providers: Mapping[str, ProviderConfig],
        metrics: GatewayMetrics,
        *,
        max_wait_seconds: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._limits = {
            name: RateLimit(p.requests_per_minute, p.tokens_per_minute, round(p.rate_burst_seconds * 1e6))
            for name, p in providers.items()
            if p.rate_limited
        }
        self._metrics = metrics
        self._max_wait_us = round(max_wait_seconds * 1e6)
        self._clock = clock
        self._sleep = sleep

    async def wait_turn(self, provider: str, request: ModelRequest) -> None:
        """Return when `request` may be sent to `provider` (at once for a provider without limits);
        raise RateDeferred when its turn would come after its deadline."""
        limit = self._limits.get(provider)
        if limit is None:
            return
        max_wait_us = self._max_wait_us
        if request.deadline is not None:
            max_wait_us = max(0, round((request.deadline - time.monotonic()) * 1e6))
        turn = await self._store.take_rate_turn(
            provider,
            limit,
            tokens=estimate_tokens(request.prompt_text()) + request.max_output_tokens,
            now_us=round(self._clock() * 1e6),
            max_wait_us=max_wait_us,
        )
        metrics = self._metrics
        if not turn.granted:
            metrics.count(metrics.rate_limit_deferred, provider)
            raise RateDeferred(provider, turn.wait_us)
        if turn.wait_us > 0:
            metrics.count(metrics.rate_limit_waits, provider)
            metrics.count(metrics.rate_limit_wait_seconds, provider, amount=turn.wait_us / 1e6)
            await self._sleep(turn.wait_us / 1e6)
