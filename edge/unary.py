"""Unary RPCs as HTTP POSTs: `/v1/<Service>/<Method>` with the request as JSON (or binary protobuf),
answered with the response in the same encoding, or a google.rpc.Status as JSON.

The body is read to its limit and no further; a request that does not parse is refused before any
service sees it, so a refusal never leaves anything half-applied.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import status_pb2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from edge.catalogue import EdgeMethod, unknown_route
from edge.forwarding import Forwarder
from edge.translation import HTTP_STATUS, parse_json, status_document, status_of, to_json
from services.errors import EgbeError, InvalidArgument, ResourceExhausted, to_rpc_status

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def status_response(status: status_pb2.Status) -> JSONResponse:
    """A refused call: its status as JSON, under the HTTP status Google's APIs give its code."""
    return JSONResponse(status_document(status), status_code=HTTP_STATUS.get(status.code, 500))


def too_large(limit: int) -> ResourceExhausted:
    return ResourceExhausted(
        f"the request is larger than the edge's limit of {limit} bytes (edge.max_frame_bytes)",
        metadata={"limit": str(limit)},
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or ResourceExhausted as soon as it passes `limit` (nothing more is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def call_unary(
    request: Request, catalogue: Mapping[str, EdgeMethod], forwarder: Forwarder, limit: int
) -> Response:
    """Forward one POSTed request and answer with the service's response or its status."""
    method = catalogue.get(request.url.path)
    try:
        if method is None:
            raise unknown_route(request.url.path)
        if method.streams:
            raise InvalidArgument.field(
                "request", f"{method.route} is a stream: open a WebSocket at this path instead of a POST"
            )
        body = await read_body(request, limit)
        binary = request.headers.get("content-type", JSON).split(";")[0].strip() == PROTOBUF
        forwarded = body if binary else parse_json(body, method.request).SerializeToString()
    except EgbeError as refusal:
        return status_response(to_rpc_status(refusal))
    try:
        answer = await forwarder.unary(method, forwarded, request.headers.get("authorization"))
    except grpc.aio.AioRpcError as error:
        return status_response(status_of(error))
    except EgbeError as refusal:
        return status_response(to_rpc_status(refusal))
    if binary:
        return Response(answer, media_type=PROTOBUF)
    return Response(to_json(method.response.FromString(answer)), media_type=JSON)
