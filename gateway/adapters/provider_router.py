"""The providers table at run time: one adapter per provider, each call sent along its class's route.

A route is the class's targets in order (`routing.class_targets`). A call that meets a transient error on
one provider (overloaded, rate-limited, unavailable, timed out), after that provider's own retry loop, is
tried on the next, inside the same adapter call: the same run budget, the same ledger reservation, one
audit record. A spend limit or any other 4xx ends the call where it is. A provider whose rate limits
have no turn for the call before its deadline (`rate_limits.ProviderRates`) passes it on the same way,
unsent. Every provider tried is named in the reply (`ModelReply.providers_tried`) or on the error that
ended the call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gateway.adapters.base import ModelAdapter, ModelReply, ModelRequest
from gateway.adapters.offline import OFFLINE_MODEL_REF
from gateway.config import ModelTarget
from gateway.provider_errors import ProviderAttempt, ProviderError
from gateway.rate_limits import ProviderRates
from services.logging import get_logger

log = get_logger(__name__)
ROUTER_NAME = "providers"


def provider_model_ref(attempt: ProviderAttempt, *, offline: bool) -> str:
    """A provider's model as the audit names it: 'provider:model id', or the offline adapter's own name."""
    return OFFLINE_MODEL_REF if offline else f"{attempt.provider}:{attempt.model_id}"


def _deadline_passed(request: ModelRequest) -> bool:
    return request.deadline is not None and time.monotonic() >= request.deadline


class ProviderRouter:
    """A `ModelAdapter` over the providers table: a call goes to the first provider of its class's route,
    naming that provider's model id, then down the route while providers fail it transiently."""

    def __init__(
        self,
        adapters: Mapping[str, ModelAdapter],
        class_targets: Mapping[str, Sequence[ModelTarget]],
        rates: ProviderRates | None = None,
    ) -> None:
        self._adapters = dict(adapters)
        self._rates = rates
        self._routes = {name: tuple(steps) for name, steps in class_targets.items()}
        # Offline only when every provider is: then nothing it answers is a model's, and it says so.
        self.offline = all(adapter.offline for adapter in self._adapters.values())
        self.name = OFFLINE_MODEL_REF if self.offline else ROUTER_NAME

    def _sent(self, target: ModelTarget, request: ModelRequest) -> tuple[ModelAdapter, ModelRequest]:
        return self._adapters[target.provider], replace(request, concrete_model_id=target.model_id)

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """The first provider's count: the one the call is budgeted for."""
        adapter, sent = self._sent(self._routes[request.model_class][0], request)
        return await adapter.count_input_tokens(sent)

    async def generate(self, request: ModelRequest) -> ModelReply:
        route = self._routes[request.model_class]
        tried: list[ProviderAttempt] = []
        for index, target in enumerate(route):
            adapter, sent = self._sent(target, request)
            try:
                if self._rates is not None:
                    await self._rates.wait_turn(target.provider, sent)
                reply = await adapter.generate(sent)
            except ProviderError as error:
                tried.append(
                    ProviderAttempt(target.provider, target.model_id, error.attempts, error.error_class.value)
                )
                last = index == len(route) - 1
                if not error.transient or last or _deadline_passed(request):
                    error.providers_tried = tuple(tried)
                    raise
                log.info(
                    "provider failed; falling back",
                    provider=target.provider,
                    error_class=error.error_class.value,
                    next_provider=route[index + 1].provider,
                )
                continue
            answered = ProviderAttempt(target.provider, target.model_id, reply.provider_attempts)
            return replace(reply, providers_tried=(*tried, answered))
        raise AssertionError("unreachable: a route has a target, and its last answers or raises")

    async def close(self) -> None:
        for adapter in self._adapters.values():
            await adapter.close()
