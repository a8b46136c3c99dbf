"""The edge's ASGI application: every served RPC at `/v1/<Service>/<Method>` (a POST for a unary RPC,
a WebSocket for a stream) and `/healthz` for probes."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from edge.catalogue import EdgeMethod
from edge.config import EdgeConfig
from edge.forwarding import Forwarder
from edge.streams import StreamLimits, relay_stream
from edge.unary import call_unary

RPC_PATH = "/v1/{service}/{method}"


def build_app(catalogue: Mapping[str, EdgeMethod], forwarder: Forwarder, config: EdgeConfig) -> Starlette:
    """The application serving `catalogue` through `forwarder` under `config`'s limits."""
    limits = StreamLimits(config.max_frame_bytes, config.first_frame_timeout_seconds)

    async def unary(request: Request) -> Response:
        return await call_unary(request, catalogue, forwarder, config.max_frame_bytes)

    async def stream(websocket: WebSocket) -> None:
        await relay_stream(websocket, catalogue.get(websocket.url.path), forwarder, limits)

    async def healthz(request: Request) -> Response:
        """The edge answers; each service's own health is on its gRPC health endpoint."""
        return JSONResponse({"status": "SERVING"})

    # A browser asks before it POSTs with an Authorization header from another origin; only the
    # configured origins are answered yes.
    cors = Middleware(
        CORSMiddleware,
        allow_origins=list(config.cors_origins),
        allow_methods=["POST"],
        allow_headers=["authorization", "content-type"],
    )
    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route(RPC_PATH, unary, methods=["POST"]),
            WebSocketRoute(RPC_PATH, stream),
        ],
        middleware=[cors] if config.cors_origins else [],
    )
