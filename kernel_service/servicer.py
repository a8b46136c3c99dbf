"""KernelService over gRPC: validate, call the tick core, map errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from services.auth import Role
from services.errors import NotBuilt
from services.grpc_types import Context

KERNEL_TICK = "the Moirai kernel tick (issue #3)"

METHOD_ROLES = {
    kernel_pb2.DESCRIPTOR.services_by_name["KernelService"].full_name: {
        "RegisterAgents": frozenset({Role.WORLD}),
        "Tick": frozenset({Role.WORLD}),
        "StreamTicks": frozenset({Role.WORLD}),
        "GetAgentState": frozenset({Role.WORLD, Role.OPERATOR, Role.SERVICE}),
        "ApplyStewardDirective": frozenset({Role.WORLD}),
    }
}


class KernelServicer(kernel_pb2_grpc.KernelServiceServicer):
    async def RegisterAgents(
        self, request: kernel_pb2.RegisterAgentsRequest, context: Context
    ) -> kernel_pb2.RegisterAgentsResponse:
        raise NotBuilt(f"agent registration in {KERNEL_TICK}")

    async def Tick(self, request: kernel_pb2.TickRequest, context: Context) -> kernel_pb2.TickResponse:
        raise NotBuilt(KERNEL_TICK)

    async def StreamTicks(
        self,
        request_iterator: AsyncIterator[kernel_pb2.StreamTicksRequest],
        context: Context,
    ) -> AsyncIterator[kernel_pb2.StreamTicksResponse]:
        raise NotBuilt(f"tick streaming in {KERNEL_TICK}")
        yield  # type: ignore[unreachable]  # makes this an async generator, as streaming handlers must be

    async def GetAgentState(
        self, request: kernel_pb2.GetAgentStateRequest, context: Context
    ) -> kernel_pb2.GetAgentStateResponse:
        raise NotBuilt(f"agent state in {KERNEL_TICK}")

    async def ApplyStewardDirective(
        self, request: kernel_pb2.ApplyStewardDirectiveRequest, context: Context
    ) -> kernel_pb2.ApplyStewardDirectiveResponse:
        raise NotBuilt("the steward-not-owner directive filter (issue #3)")
