"""The async dispatcher: outside the tick, it forwards candidates and lifecycle work and collects results.

A tick only ever calls `offer` (enqueue, never waits) and `take_results` (drain what has completed),
so a slow or absent gateway can never delay a tick. Results re-enter the next tick as its input,
which the tick log records, so replay does not depend on when a result happened to arrive.

Each submitted call carries its moment (the Ori's situation text and the kernel's values on the
issuing tick), taken when the tick offers its calls and written into the submitted copy only; each
result's payload gets "dispatch_us", the monotonic microseconds from the offer to the gateway's
answer. Each submitted call is the root of its trace (`kernel.dispatch`, sampled; see
services/tracing.py): a span per call, outside the tick, none per tick or per agent on it.
Registration's identities go to the biography through the same channel, before the kernel
registers anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from egbe.v1 import action_pb2, biography_pb2, biography_pb2_grpc, common_pb2, gateway_pb2, gateway_pb2_grpc
from kernel_service.moment import Moments
from services import tracing
from services.auth import bearer_metadata
from services.channels import ChannelOpener
from services.logging import get_logger

if TYPE_CHECKING:
    from egbe.v1.biography_pb2_grpc import BiographyServiceAsyncStub
    from egbe.v1.gateway_pb2_grpc import CognitionGatewayServiceAsyncStub

log = get_logger(__name__)

MODES = {
    action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING: gateway_pb2.COGNITION_MODE_DECISION,
    action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION: gateway_pb2.COGNITION_MODE_REFLECTION,
    action_pb2.COGNITION_CAUSE_GUARD_REFLECTION: gateway_pb2.COGNITION_MODE_REFLECTION,
    action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY: gateway_pb2.COGNITION_MODE_SUMMARY,
    action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY: gateway_pb2.COGNITION_MODE_DECISION,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL: gateway_pb2.COGNITION_MODE_DECISION,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD: gateway_pb2.COGNITION_MODE_DECISION,
    action_pb2.COGNITION_CAUSE_DIALOGUE: gateway_pb2.COGNITION_MODE_DIALOGUE,
}


ALL_TIERS = frozenset(
    {common_pb2.COGNITION_TIER_CLOTHO, common_pb2.COGNITION_TIER_LACHESIS, common_pb2.COGNITION_TIER_ATROPOS}
)
# A tier the gateway refused (kill switch: ABORTED; spent budget: RESOURCE_EXHAUSTED) stays
# unavailable until a call of that tier succeeds again; an unreachable gateway makes every tier so.
REFUSING_CODES = frozenset({grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED})
UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _call_attributes(candidate: action_pb2.CognitionCallCandidate) -> dict[str, str | int]:
    """What a cognition call's trace says of it at its root."""
    return {
        "egbe.call_id": candidate.call_id,
        "egbe.world_id": candidate.ori.world_id,
        "egbe.ori_id": candidate.ori.ori_id,
        "egbe.tier": candidate.tier,
        "egbe.cause": candidate.cause,
        "egbe.tick": candidate.tick,
    }


@dataclass
class DispatchStats:
    """Counters for health and tests: what was offered, sent, shed, answered and failed."""

    candidates_offered: int = 0
    candidates_reported_only: int = 0
    candidates_sent: int = 0
    candidates_shed: int = 0
    results_received: int = 0
    failures: int = 0
    lifecycle_offered: int = 0
    lifecycle_sent: int = 0
    fragments_consolidated: int = 0
    # Consolidations the biography reported as losing a fragment (expected: never).
    consolidations_with_loss: int = 0


@dataclass(frozen=True)
class Offer:
    """What one tick's calls share: their moments (None: none taken) and when they were offered."""

    moments: Moments | None
    offered_ns: int  # time.monotonic_ns()


# A queued call: the candidate (inside the tick's result, never written), its offer, its index there.
Queued = tuple[action_pb2.CognitionCallCandidate, Offer, int]


class Dispatcher:
    """Bounded queues drained by background tasks; with no target configured it only reports."""

    def __init__(
        self,
        *,
        gateway_target: str | None = None,
        biography_target: str | None = None,
        token: str | None = None,
        queue_limit: int = 10_000,
        concurrency: int = 8,
        call_timeout_seconds: float = 30.0,
        dial: ChannelOpener | None = None,
    ) -> None:
        if (gateway_target or biography_target) and dial is None:
            raise ValueError("a dispatcher with targets needs a channel opener (services.channels)")
        self._dial = dial
        self.gateway_target = gateway_target
        self.biography_target = biography_target
        self.stats = DispatchStats()
        self._metadata = bearer_metadata(token) if token else ()
        self._queue_limit = queue_limit
        self._concurrency = concurrency
        self._timeout = call_timeout_seconds
        self._dial = dial  # services.channels.open_channel in a server, so TLS settings apply
        self._candidates: deque[Queued] = deque()
        # A player waits on a dialogue call: it goes ahead of every queued planning, reflection and
        # summary, which only keep an Ori's behaviour fresh.
        self._dialogue: deque[Queued] = deque()
        self._lifecycle: deque[action_pb2.LifecycleRequest] = deque()
        self._results: list[action_pb2.ActionIntent] = []
        self._refused_tiers: set[int] = set()
        self._gateway_unreachable = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: list[grpc.aio.Channel] = []
        self._biography: BiographyServiceAsyncStub | None = None

    def offer(self, result: action_pb2.TickResult, moments: Callable[[], Moments] | None = None) -> None:
        """Take a tick's candidates and lifecycle requests; never blocks; sheds the oldest past the limit.

        `moments` takes the moment of each of the tick's calls; it is called only when there are calls
        to submit (never without a gateway)."""
        self.stats.candidates_offered += len(result.candidates)
        self.stats.lifecycle_offered += len(result.lifecycle)
        if self.gateway_target is None:
            # No gateway: the candidates are reported in the tick result and the Ori keep their
            # behaviour-tree or cached actions.
            self.stats.candidates_reported_only += len(result.candidates)
        else:
            offer = Offer(
                moments() if moments is not None and result.candidates else None, time.monotonic_ns()
            )
            for queued in zip(result.candidates, itertools.repeat(offer), itertools.count()):
                urgent = queued[0].cause == action_pb2.COGNITION_CAUSE_DIALOGUE
                (self._dialogue if urgent else self._candidates).append(queued)
            while self.pending_candidates > self._queue_limit:
                (self._candidates or self._dialogue).popleft()
                self.stats.candidates_shed += 1
        if self.biography_target is not None:
            self._lifecycle.extend(result.lifecycle)
            while len(self._lifecycle) > self._queue_limit:
                self._lifecycle.popleft()
        if self._dialogue or self._candidates or self._lifecycle:
            self._wake.set()

    @property
    def pending_candidates(self) -> int:
        """Candidates queued for the gateway and not yet sent."""
        return len(self._dialogue) + len(self._candidates)

    def unavailable_tiers(self) -> int:
        """Bit t set = tier t's cognition is unavailable, killed or over budget, as last observed.

        Without a gateway no call is ever made, so every tier is unavailable: arbitration then keeps
        every Ori on its behaviour tree instead of escalating into a call nobody will answer.
        """
        tiers = ALL_TIERS if self.gateway_target is None or self._gateway_unreachable else self._refused_tiers
        return sum(1 << tier for tier in tiers)

    def take_results(self) -> list[action_pb2.ActionIntent]:
        """Completed cognition actions, to merge into the next tick."""
        results, self._results = self._results, []
        return results

    def _open(self, target: str) -> grpc.aio.Channel:
        assert self._dial is not None  # checked in __init__ whenever a target is set
        return self._dial(target)

    async def start(self) -> None:
        if self.gateway_target is not None:
            channel = self._open(self.gateway_target)
            self._channels.append(channel)
            gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
            self._tasks += [asyncio.create_task(self._submit_loop(gateway)) for _ in range(self._concurrency)]
            # One more lane that takes dialogue calls only: a player's line never waits for a lane
            # that slow planning or summary runs hold.
            self._tasks.append(asyncio.create_task(self._submit_loop(gateway, dialogue_only=True)))
        if self.biography_target is not None:
            channel = self._open(self.biography_target)
            self._channels.append(channel)
            self._biography = biography_pb2_grpc.BiographyServiceStub(channel)
            self._tasks.append(asyncio.create_task(self._lifecycle_loop(self._biography)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for channel in self._channels:
            await channel.close(None)
        self._tasks.clear()
        self._channels.clear()
        self._biography = None

    async def register_identities(
        self, registrations: Sequence[biography_pb2.IdentityRegistration]
    ) -> biography_pb2.RegisterIdentitiesResponse:
        """Record identities in the biography (service token, call timeout); raises the call's
        grpc.aio.AioRpcError. Only on a started dispatcher with a biography target."""
        if self._biography is None:
            raise RuntimeError("register_identities needs a started dispatcher with a biography target")
        response: biography_pb2.RegisterIdentitiesResponse = await self._biography.RegisterIdentities(
            biography_pb2.RegisterIdentitiesRequest(registrations=registrations),
            metadata=self._metadata,
            timeout=self._timeout,
        )
        return response

    async def _next(self, *, dialogue_only: bool = False) -> Queued:
        """The oldest dialogue call, else (unless `dialogue_only`) the oldest other call."""
        while not (self._dialogue or (self._candidates and not dialogue_only)):
            self._wake.clear()
            await self._wake.wait()
        return (self._dialogue or self._candidates).popleft()

    async def _submit_loop(
        self, gateway: CognitionGatewayServiceAsyncStub, *, dialogue_only: bool = False
    ) -> None:
        while True:
            candidate, offer, index = await self._next(dialogue_only=dialogue_only)
            self.stats.candidates_sent += 1
            request = gateway_pb2.SubmitRequest(
                candidate=candidate, request_id=candidate.call_id, mode=MODES[candidate.cause]
            )
            if offer.moments is not None:
                offer.moments.fill(index, request.candidate.moment)  # the copy, not the tick's result
            try:
                with tracing.span("kernel", "kernel.dispatch", _call_attributes(candidate)):
                    response = await gateway.Submit(request, metadata=self._metadata, timeout=self._timeout)
            except grpc.aio.AioRpcError as error:
                # The Ori keeps its cached action; the next tick learns only which tiers are refused.
                self.stats.failures += 1
                log.warning(
                    "gateway submit failed",
                    call_id=candidate.call_id,
                    ori_name=offer.moments.display_name(index) if offer.moments is not None else "",
                    code=error.code().name,
                )
                if error.code() in REFUSING_CODES:
                    self._refused_tiers.add(candidate.tier)
                elif error.code() in UNREACHABLE_CODES:
                    self._gateway_unreachable = True
                continue
            dispatch_us = (time.monotonic_ns() - offer.offered_ns) // 1_000
            self._refused_tiers.discard(candidate.tier)
            self._gateway_unreachable = False
            for action in response.actions:
                action.slot = candidate.slot
                action.payload["dispatch_us"] = dispatch_us
                self._results.append(action)
                self.stats.results_received += 1

    async def _lifecycle_loop(self, biography: BiographyServiceAsyncStub) -> None:
        while True:
            while not self._lifecycle:
                self._wake.clear()
                await self._wake.wait()
            request = self._lifecycle.popleft()
            self.stats.lifecycle_sent += 1
            try:
                if request.kind == action_pb2.LifecycleRequest.KIND_REHYDRATE:
                    await biography.Rehydrate(
                        biography_pb2.RehydrateRequest(ori_id=request.ori.ori_id),
                        metadata=self._metadata,
                        timeout=self._timeout,
                    )
                else:
                    done = await biography.Consolidate(
                        biography_pb2.ConsolidateRequest(
                            ori_id=request.ori.ori_id,
                            fragments=request.fragments,
                            request_id=f"{request.ori.world_id}:{request.tick}:{request.slot}:consolidate",
                        ),
                        metadata=self._metadata,
                        timeout=self._timeout,
                    )
                    self.stats.fragments_consolidated += len(request.fragments)
                    if not done.no_state_loss:
                        self.stats.consolidations_with_loss += 1
                        log.error(
                            "consolidation lost fragments",
                            ori=request.ori.ori_id,
                            missing=list(done.missing_fragment_ids),
                        )
            except grpc.aio.AioRpcError as error:
                self.stats.failures += 1
                log.warning("biography lifecycle call failed", ori=request.ori.ori_id, code=error.code().name)
