"""The edge's gRPC side: one channel per Egbe service it forwards to, and the caller's token on every
call, so the service authenticates, authorizes, scopes and limits the caller as if it had dialled it.

Messages cross as bytes (no serializer on either side): a binary request is forwarded unparsed, and a
service refuses what does not decode exactly as it refuses it from any gRPC client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import grpc

from edge.catalogue import EdgeMethod
from services.auth import AUTHORIZATION_HEADER
from services.channels import open_channel
from services.errors import Unavailable
from services.settings import ChassisSettings

BytesStream = grpc.aio.StreamStreamCall[bytes, bytes]


def forwarded_metadata(authorization: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying the caller's own Authorization value (none when it sent none)."""
    return () if authorization is None else ((AUTHORIZATION_HEADER, authorization),)


class Forwarder:
    """Channels to the services, opened on first use and closed with the edge."""

    def __init__(self, targets: Mapping[str, str], settings: ChassisSettings) -> None:
        self._targets = dict(targets)
        self._settings = settings
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, method: EdgeMethod) -> grpc.aio.Channel:
        channel = self._channels.get(method.process)
        if channel is None:
            target = self._targets.get(method.process)
            if target is None:
                raise Unavailable(f"the edge knows no target for the {method.process} service")
            channel = self._channels[method.process] = open_channel(target, self._settings)
        return channel

    async def unary(self, method: EdgeMethod, request: bytes, authorization: str | None) -> bytes:
        """One unary call; a refusal raises grpc.aio.AioRpcError carrying the service's status."""
        call = self._channel(method).unary_unary(
            method.grpc_path, request_serializer=None, response_deserializer=None
        )
        answer: bytes = await call(request, metadata=forwarded_metadata(authorization))
        return answer

    def stream(self, method: EdgeMethod, authorization: str | None) -> BytesStream:
        """A call of any stream shape, as a bidi stream of bytes (the wire is the same for all)."""
        call = self._channel(method).stream_stream(
            method.grpc_path, request_serializer=None, response_deserializer=None
        )
        return call(None, metadata=forwarded_metadata(authorization))

    async def close(self) -> None:
        await asyncio.gather(*(channel.close(None) for channel in self._channels.values()))
        self._channels.clear()
