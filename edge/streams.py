"""Stream RPCs (`StreamTicks` above all) as one WebSocket at `/v1/<Service>/<Method>`.

Each request is one frame: a text frame holds the message in the canonical JSON mapping, a binary
frame the serialized message. Each response is one frame in the encoding of the first request frame.
The token comes in the upgrade's Authorization header or, where a client cannot set one (a browser),
in a first text frame `{"authorization": "Bearer <token>"}`.

A call that fails ends the socket as gRPC ends the stream: a last text frame `{"error": <google.rpc.Status
as JSON>}`, then a close with code 4000 + the status code (4003 INVALID_ARGUMENT, 4016 UNAUTHENTICATED).
A frame the edge refuses (not JSON, an unknown field, over the limit) is never forwarded: the edge
half-closes the call, relays the answers to the frames before it, then sends its refusal; nothing of
the refused frame is applied. A stream that ends well closes with 1000.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import status_pb2
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from edge.catalogue import EdgeMethod, unknown_route
from edge.forwarding import BytesStream, Forwarder
from edge.translation import parse_json, status_document, status_of, to_json
from services.auth import BEARER_PREFIX
from services.errors import EgbeError, InvalidArgument, ResourceExhausted, Unauthenticated, to_rpc_status

NORMAL_CLOSURE = 1000
STATUS_CLOSE_BASE = 4000  # close code = 4000 + google.rpc.Code of the status that ended the stream


@dataclass(frozen=True)
class StreamLimits:
    """What one WebSocket may send: its largest frame, and how long it may take to name its token."""

    max_frame_bytes: int
    first_frame_timeout_seconds: float


def _frame_size(message: Mapping[str, Any]) -> int:
    text = message.get("text")
    if isinstance(text, str):
        return len(text.encode())
    data = message.get("bytes")
    return len(data) if isinstance(data, bytes) else 0


async def _authorization(websocket: WebSocket, limits: StreamLimits) -> str:
    """The caller's Authorization value: the upgrade's header, else the first frame's."""
    header = websocket.headers.get("authorization")
    if header is not None:
        return header
    try:
        message = await asyncio.wait_for(websocket.receive(), limits.first_frame_timeout_seconds)
    except TimeoutError:
        raise Unauthenticated(
            f"no authorization within {limits.first_frame_timeout_seconds:g} s: send the Authorization "
            'header on the upgrade or a first frame {"authorization": "Bearer <token>"}'
        ) from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", NORMAL_CLOSURE))
    try:
        if _frame_size(message) > limits.max_frame_bytes:
            raise ValueError
        value = json.loads(message.get("text") or "null")["authorization"]
    except (ValueError, TypeError, KeyError):
        value = None
    if not isinstance(value, str) or not value.startswith(BEARER_PREFIX):
        raise Unauthenticated(
            'the first frame must be {"authorization": "Bearer <token>"} when the upgrade carries '
            "no Authorization header"
        )
    return value


async def end_socket(websocket: WebSocket, status: status_pb2.Status) -> None:
    """The last frame and the close: 1000 for a stream that ended well, else the status first."""
    if status.code == 0:
        await websocket.close(NORMAL_CLOSURE)
        return
    await websocket.send_text(json.dumps({"error": status_document(status)}))
    await websocket.close(STATUS_CLOSE_BASE + status.code)


class _Relay:
    """One WebSocket bound to one gRPC call, both ways."""

    def __init__(self, websocket: WebSocket, method: EdgeMethod, limits: StreamLimits) -> None:
        self._websocket = websocket
        self._method = method
        self._limits = limits
        self._binary: bool | None = None  # set by the first request frame

    def _request_bytes(self, message: Mapping[str, Any], index: int) -> bytes:
        """A frame's request, serialized; refused whole when it is too large or does not parse."""
        size = _frame_size(message)
        if size > self._limits.max_frame_bytes:
            limit = self._limits.max_frame_bytes
            raise ResourceExhausted(
                f"frame {index} has {size} bytes, over the edge's limit of {limit} (edge.max_frame_bytes)",
                metadata={"limit": str(limit)},
            )
        data = message.get("bytes")
        if self._binary is None:
            self._binary = isinstance(data, bytes)
        if isinstance(data, bytes):
            return data
        text = message.get("text")
        return parse_json(text if isinstance(text, str) else "", self._method.request).SerializeToString()

    async def forward_requests(self, call: BytesStream) -> EgbeError | None:
        """Frames into the call until the client closes (None) or a frame is refused (the refusal)."""
        index = 0
        while True:
            message = await self._websocket.receive()
            if message["type"] == "websocket.disconnect":
                call.cancel()
                return None
            if index == 1 and not self._method.client_streaming:
                return InvalidArgument.field("request", f"{self._method.route} takes one request frame")
            try:
                request = self._request_bytes(message, index)
            except EgbeError as refusal:
                return refusal
            await call.write(request)
            if not self._method.client_streaming:
                await call.done_writing()
            index += 1

    async def send_responses(self, call: BytesStream) -> None:
        """Every answer as a frame, in order, until the call ends (an AioRpcError when it fails)."""
        async for answer in call:
            if self._binary:
                await self._websocket.send_bytes(answer)
            else:
                await self._websocket.send_text(to_json(self._method.response.FromString(answer)))

    async def run(self, call: BytesStream) -> status_pb2.Status | None:
        """Relay until either side ends; the status to end the socket with (None: the client left)."""
        responses = asyncio.create_task(self.send_responses(call))
        requests = asyncio.create_task(self.forward_requests(call))
        try:
            await asyncio.wait({responses, requests}, return_when=asyncio.FIRST_COMPLETED)
            if requests.done():
                error = requests.exception()
                if error is None:
                    refusal = requests.result()
                    if refusal is None:
                        return None  # the client closed; the call is cancelled
                    # The frames before the refused one are the service's: it answers them first.
                    with contextlib.suppress(grpc.aio.UsageError, grpc.aio.AioRpcError):
                        await call.done_writing()
                    await asyncio.wait({responses})
                    return self._outcome(responses, call) or to_rpc_status(refusal)
                if not isinstance(error, grpc.aio.AioRpcError | grpc.aio.UsageError):
                    call.cancel()
                    raise error
            # The call ended (a write to it failed because it had): its status ends the socket.
            requests.cancel()
            await asyncio.wait({responses})
            return self._outcome(responses, call) or status_pb2.Status(code=0)
        finally:
            for task in (responses, requests):
                task.cancel()
            await asyncio.gather(responses, requests, return_exceptions=True)
            call.cancel()  # no stream outlives its socket (a no-op on a call that has ended)

    @staticmethod
    def _outcome(responses: asyncio.Task[None], call: BytesStream) -> status_pb2.Status | None:
        """The failed call's status; None when every answer was relayed and the call ended well."""
        error = responses.exception()
        if error is None:
            return None
        if isinstance(error, grpc.aio.AioRpcError):
            return status_of(error)
        call.cancel()
        raise error


async def relay_stream(
    websocket: WebSocket, method: EdgeMethod | None, forwarder: Forwarder, limits: StreamLimits
) -> None:
    """Serve one WebSocket: authorize, open the call, relay, end with the call's status."""
    await websocket.accept()
    try:
        if method is None or not method.streams:
            raise unknown_route(websocket.url.path)
        relay = _Relay(websocket, method, limits)
        status = await relay.run(forwarder.stream(method, await _authorization(websocket, limits)))
    except EgbeError as refusal:
        status = to_rpc_status(refusal)
    except (WebSocketDisconnect, OSError):
        return  # the client went away; its call is cancelled
    if status is not None:
        with contextlib.suppress(WebSocketDisconnect, WebSocketDisconnected, OSError):
            await end_socket(websocket, status)
