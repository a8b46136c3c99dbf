"""Serves the edge on uvicorn inside the caller's event loop: beside the services in `egbe up`, or
alone in its own process (`egbe edge`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import uvicorn

from edge.app import build_app
from edge.catalogue import build_catalogue
from edge.config import EdgeServiceSettings
from edge.forwarding import Forwarder
from services.logging import get_logger
from services.runtime import wait_for_signal

log = get_logger(__name__)

# The edge's name in the published endpoints file (`<data_dir>/endpoints.json`).
EDGE_ENDPOINT = "edge"

# Frames between edge.max_frame_bytes and this multiple of it are read and refused with a status;
# larger ones are refused by the WebSocket parser from their header, unread (close 1009).
TRANSPORT_FRAME_FACTOR = 2


class _HostedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the process that hosts the edge owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class RunningEdge:
    """A started edge: where it listens and how to stop it."""

    target: str
    _server: _HostedServer
    _task: asyncio.Task[None]
    _forwarder: Forwarder

    async def stop(self) -> None:
        """Stop accepting, let open requests finish within the shutdown grace, close the channels."""
        self._server.should_exit = True
        await self._task
        await self._forwarder.close()
        log.info("edge stopped", target=self.target)


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family)


async def start_edge(settings: EdgeServiceSettings, targets: Mapping[str, str]) -> RunningEdge:
    """Serve the edge for the services at `targets` (service name -> gRPC target); returns once it
    listens."""
    config = settings.edge
    forwarder = Forwarder(targets, settings)
    app = build_app(build_catalogue(config.withheld_services), forwarder, config)
    sock = _listening_socket(config.host, config.port)
    server = _HostedServer(
        uvicorn.Config(
            app,
            http="httptools",
            ws="websockets-sansio",
            ws_per_message_deflate=False,
            ws_max_size=config.max_frame_bytes * TRANSPORT_FRAME_FACTOR,
            lifespan="off",
            log_config=None,
            access_log=False,
            limit_concurrency=config.max_connections,
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_seconds)),
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            task.result()
            raise RuntimeError("the edge stopped before it listened")
        await asyncio.sleep(0.01)
    host, port = sock.getsockname()[:2]
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    log.info("edge serving", target=target, forwards_to=dict(targets))
    return RunningEdge(target, server, task, forwarder)


async def serve_edge_until_signalled(settings: EdgeServiceSettings, targets: Mapping[str, str]) -> None:
    """`egbe edge`: the edge alone, forwarding to services served elsewhere, until SIGTERM or SIGINT."""
    running = await start_edge(settings, targets)
    await wait_for_signal([], settings)
    await running.stop()
