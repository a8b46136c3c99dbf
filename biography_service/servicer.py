"""BiographyService over gRPC: validate, call the store, map errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import Role
from services.errors import NotBuilt
from services.grpc_types import Context

_WRITERS = frozenset({Role.SERVICE})
_READERS = frozenset({Role.SERVICE, Role.OPERATOR})

METHOD_ROLES = {
    biography_pb2.DESCRIPTOR.services_by_name["BiographyService"].full_name: {
        "Append": _WRITERS,
        "Consolidate": _WRITERS,
        "Read": _READERS,
        "Subscribe": _READERS,
        "Rehydrate": _READERS,
        "VerifyChain": _READERS,
    }
}

EVENT_LOG = "the Ori event log (issue #4)"


class BiographyServicer(biography_pb2_grpc.BiographyServiceServicer):
    async def Append(
        self, request: biography_pb2.AppendRequest, context: Context
    ) -> biography_pb2.AppendResponse:
        raise NotBuilt(EVENT_LOG)

    async def Read(self, request: biography_pb2.ReadRequest, context: Context) -> biography_pb2.ReadResponse:
        raise NotBuilt(EVENT_LOG)

    async def Subscribe(
        self, request: biography_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[biography_pb2.SubscribeResponse]:
        raise NotBuilt(EVENT_LOG)
        yield  # type: ignore[unreachable]  # makes this an async generator, as streaming handlers must be

    async def Rehydrate(
        self, request: biography_pb2.RehydrateRequest, context: Context
    ) -> biography_pb2.RehydrateResponse:
        raise NotBuilt(EVENT_LOG)

    async def Consolidate(
        self, request: biography_pb2.ConsolidateRequest, context: Context
    ) -> biography_pb2.ConsolidateResponse:
        raise NotBuilt(EVENT_LOG)

    async def VerifyChain(
        self, request: biography_pb2.VerifyChainRequest, context: Context
    ) -> biography_pb2.VerifyChainResponse:
        raise NotBuilt(EVENT_LOG)
