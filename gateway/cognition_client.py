"""The gateway's client of CognitionService.Think, dialled lazily with the service token."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from egbe.v1 import cognition_pb2, cognition_pb2_grpc
from services.auth import bearer_metadata
from services.channels import ChannelOpener


class CognitionClient:
    """Calls Think on the cognition endpoint; target and token resolved at use (ports may be ephemeral)."""

    def __init__(
        self, resolve_target: Callable[[], str], resolve_token: Callable[[], str], dial: ChannelOpener
    ) -> None:
        self._resolve_target = resolve_target
        self._resolve_token = resolve_token
        self._dial = dial
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> cognition_pb2_grpc.CognitionServiceStub:
        if self._channel is None:
            self._channel = self._dial(self._resolve_target())
        return cognition_pb2_grpc.CognitionServiceStub(self._channel)

    async def think(
        self, request: cognition_pb2.ThinkRequest, *, deadline_seconds: float
    ) -> cognition_pb2.ThinkResponse:
        metadata = bearer_metadata(self._resolve_token())
        call = self._stub().Think(request, metadata=metadata, timeout=deadline_seconds)
        response: cognition_pb2.ThinkResponse = await call  # type: ignore[misc]  # grpc-stubs type sync stubs
        return response

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
