"""KernelService over gRPC: validate, call the kernel, hand its work to the dispatcher."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator

from egbe.v1 import action_pb2, kernel_pb2, kernel_pb2_grpc, perception_pb2
from kernel_service.dispatcher import Dispatcher
from kernel_service.errors import mapped
from kernel_service.identities import record_identities
from kernel_service.kernel import Kernel
from kernel_service.metrics import KernelMetrics
from kernel_service.steward import StewardPolicy, decide
from kernel_service.tick_log import TickLogWriter
from services.auth import Role, caller_scope, require_scope
from services.errors import InvalidArgument
from services.grpc_types import Context
from services.logging import bind_context, get_logger

KNOWN_DIRECTIVE_KINDS = frozenset(kernel_pb2.StewardDirectiveKind.values()) - {
    kernel_pb2.STEWARD_DIRECTIVE_KIND_UNSPECIFIED
}
log = get_logger(__name__)

METHOD_ROLES = {
    kernel_pb2.DESCRIPTOR.services_by_name["KernelService"].full_name: {
        "RegisterAgents": frozenset({Role.WORLD}),
        "Tick": frozenset({Role.WORLD}),
        "StreamTicks": frozenset({Role.WORLD}),
        "GetAgentState": frozenset({Role.WORLD, Role.OPERATOR, Role.SERVICE}),
        "ApplyStewardDirective": frozenset({Role.WORLD}),
        "ReplayTicks": frozenset({Role.WORLD, Role.OPERATOR}),
        "RestoreSnapshot": frozenset({Role.WORLD}),
    }
}


def _settle_population() -> None:
    """Registration builds the population's long-lived objects (the registry's lists and its
    ori-to-slot map, a million entries each at scale); frozen, the collector never walks them again.
    Unfrozen, every full collection on the tick path traversed them all: tens of milliseconds at a
    million agents, landing on whichever tick tripped it. Collected first, so no garbage is frozen."""
    gc.collect()
    gc.freeze()


class KernelServicer(kernel_pb2_grpc.KernelServiceServicer):
    """Thin: every rule lives in Kernel; the dispatcher works outside the tick."""

    def __init__(
        self,
        kernel: Kernel,
        dispatcher: Dispatcher,
        steward_policy: StewardPolicy,
        tick_log: TickLogWriter | None = None,
        metrics: KernelMetrics | None = None,
    ) -> None:
        self._kernel = kernel
        self._dispatcher = dispatcher
        self._steward_policy = steward_policy
        self._tick_log = tick_log
        self._metrics = metrics

    def _check_world(self, world_id: str) -> None:
        self._in_scope(world_id)
        if world_id and self._kernel.world_id and world_id != self._kernel.world_id:
            raise InvalidArgument.field("world_id", f"this kernel serves world {self._kernel.world_id!r}")

    def _in_scope(self, world_id: str, at: str = "") -> None:
        """A scoped token acts only for its worlds: the one the request names, else the one this
        kernel serves (a request naming no world acts for it)."""
        require_scope(world=world_id or self._kernel.world_id or None, at=at)

    async def RegisterAgents(
        self, request: kernel_pb2.RegisterAgentsRequest, context: Context
    ) -> kernel_pb2.RegisterAgentsResponse:
        self._in_scope(request.world_id)
        if not caller_scope().unrestricted:
            for index, agent in enumerate(request.agents):
                ori = agent.ori
                require_scope(tenant=ori.tenant_id, world=ori.world_id or None, at=f"agents[{index}].ori")
        # Identities first: the biography records them before the kernel registers anyone.
        with mapped():
            await record_identities(self._kernel, self._dispatcher, request)
        slots = self._kernel.register(request.world_id, request.agents)
        if self._tick_log is not None:
            self._tick_log.record_registration(request)
        response = kernel_pb2.RegisterAgentsResponse(slots=slots, registered_total=self._kernel.arrays.count)
        _settle_population()
        return response

    def _tick(self, batch: perception_pb2.PerceptionBatch, into: action_pb2.TickResult) -> None:
        """Tick into the response's own result message (see Kernel.tick)."""
        self._in_scope(batch.world_id, "batch")
        decoded = self._kernel.decode(batch)  # refuse a bad batch before taking the dispatcher's results
        merged = self._mergeable(self._dispatcher.take_results())
        unavailable = self._dispatcher.unavailable_tiers()
        result = self._kernel.tick(batch, merged, unavailable, decoded=decoded, into=into)
        if self._tick_log is not None:
            self._tick_log.record_tick(batch, merged, result, self._kernel, unavailable)
        self._dispatcher.offer(result, self._kernel.capture_moments)
        if self._metrics is not None:
            self._metrics.observe(result.report)

    def _mergeable(self, results: list[action_pb2.ActionIntent]) -> list[action_pb2.ActionIntent]:
        """The dispatcher's results the tick can merge. One that does not fit (an unknown kind, a plan
        step past its array, a slot a restore removed) is dropped and logged: a peer's bad answer must
        neither stop the world's tick nor reach the agent arrays; the tick log records what merged."""
        kept = []
        for index, intent in enumerate(results):
            violations = self._kernel.result_violations(index, intent)
            if violations:
                log.warning(
                    "cognition result dropped",
                    slot=intent.slot,
                    problems="; ".join(f"{v.field}: {v.description}" for v in violations),
                )
            else:
                kept.append(intent)
        return kept

    async def ReplayTicks(
        self,
        request_iterator: AsyncIterator[kernel_pb2.ReplayTicksRequest],
        context: Context,
    ) -> AsyncIterator[kernel_pb2.ReplayTicksResponse]:
        """The logged results merge as they did; nothing reaches the dispatcher (no call is made twice)."""
        async for request in request_iterator:
            logged = request.tick
            self._in_scope(logged.batch.world_id, "tick.batch")
            response = kernel_pb2.ReplayTicksResponse()
            self._kernel.tick(
                logged.batch,
                logged.merged_results,
                logged.cognition_unavailable_tiers,
                into=response.result,
            )
            if self._tick_log is not None:
                self._tick_log.record_tick(
                    logged.batch,
                    logged.merged_results,
                    response.result,
                    self._kernel,
                    logged.cognition_unavailable_tiers,
                )
            yield response

    async def RestoreSnapshot(
        self, request: kernel_pb2.RestoreSnapshotRequest, context: Context
    ) -> kernel_pb2.RestoreSnapshotResponse:
        snapshot = request.snapshot
        self._in_scope(snapshot.world_id, "snapshot")
        if not caller_scope().unrestricted:
            for tenant in sorted(set(snapshot.tenant_ids)):
                require_scope(tenant=tenant, at="snapshot")
        if not snapshot.ori_ids:
            raise InvalidArgument.field("snapshot.ori_ids", "a snapshot names at least one Ori")
        self._kernel.restore(snapshot)
        if self._tick_log is not None:
            self._tick_log.record_snapshot(snapshot)
        return kernel_pb2.RestoreSnapshotResponse(last_tick=snapshot.last_tick, agents=len(snapshot.ori_ids))

    async def Tick(self, request: kernel_pb2.TickRequest, context: Context) -> kernel_pb2.TickResponse:
        bind_context(world=request.batch.world_id or self._kernel.world_id)
        response = kernel_pb2.TickResponse()
        self._tick(request.batch, response.result)
        return response

    async def StreamTicks(
        self,
        request_iterator: AsyncIterator[kernel_pb2.StreamTicksRequest],
        context: Context,
    ) -> AsyncIterator[kernel_pb2.StreamTicksResponse]:
        bind_context(world=self._kernel.world_id)  # (a stream ticks the one world this kernel serves)
        async for request in request_iterator:
            response = kernel_pb2.StreamTicksResponse()
            self._tick(request.batch, response.result)
            yield response

    async def GetAgentState(
        self, request: kernel_pb2.GetAgentStateRequest, context: Context
    ) -> kernel_pb2.GetAgentStateResponse:
        self._check_world(request.world_id)
        which = request.WhichOneof("agent")
        if which is None:
            raise InvalidArgument.field("agent", "set slot or ori_id")
        with mapped():
            slot = self._kernel.slot_of(
                request.slot if which == "slot" else None, request.ori_id if which == "ori_id" else None
            )
        return self._kernel.agent_state(slot)

    async def ApplyStewardDirective(
        self, request: kernel_pb2.ApplyStewardDirectiveRequest, context: Context
    ) -> kernel_pb2.ApplyStewardDirectiveResponse:
        if request.directive.kind not in KNOWN_DIRECTIVE_KINDS:
            raise InvalidArgument.field("directive.kind", "must name a known directive kind")
        if not request.ori_id:
            raise InvalidArgument.field("ori_id", "must be set")
        self._check_world(request.world_id)
        with mapped():
            slot = self._kernel.slot_of(None, request.ori_id)
            judgement = await self._steward_policy.judge(request.directive, context.time_remaining())
        decision = decide(request.directive, slot, request.ori_id, judgement)
        return kernel_pb2.ApplyStewardDirectiveResponse(
            allowed=decision.allowed,
            classified_kind=kernel_pb2.StewardDirectiveKind.ValueType(decision.classified_kind),
            reclassified=decision.reclassified,
            action=decision.action,
            policy_ref=decision.policy_ref,
        )
