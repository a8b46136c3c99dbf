"""Serving the console inside an asyncio process (`egbe console` alone, or beside the services `egbe up`
runs): the socket bound first (a port in use is the user's to fix, not a crash), uvicorn on that socket
without its own signal handling (the process that hosts it stops it), and the clients and poll loop
closed with it."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import uvicorn

from console.app import Console, build_app
from console.clients import ConsoleClients
from console.config import ConsoleSettings
from console.sessions import ViewerTokens
from console.watch import Watch
from services.settings import UserError

GRACEFUL_STOP_SECONDS = 2.0  # open event streams are cut after this long


@dataclass
class RunningConsole:
    url: str
    server: uvicorn.Server
    task: asyncio.Task[None]
    watch: Watch
    clients: ConsoleClients

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task
        await self.watch.close()
        await self.clients.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(
            f"the console cannot listen on {host}:{port}: {exc.strerror}; set console.port "
            "(EGBE_CONSOLE__PORT) to a free port, or console.enabled = false"
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def start_console(
    settings: ConsoleSettings, operator_target: str, biography_target: str, reader_token: str
) -> RunningConsole:
    """Serve the console until `stop()`; its URL names the port actually bound (port 0: any free one)."""
    config = settings.console
    try:
        viewers = ViewerTokens.load(config.viewer_tokens_file)
    except (ValueError, PermissionError) as exc:
        raise UserError(str(exc)) from None
    sock = _bind(config.host, config.port)
    clients = ConsoleClients.dial(operator_target, biography_target, settings, reader_token)
    watch = Watch(clients, config)
    app = build_app(Console(clients, config, viewers, watch))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=int(GRACEFUL_STOP_SECONDS),
        )
    )
    server.config.load()
    server.lifespan = server.config.lifespan_class(server.config)
    await server.startup(sockets=[sock])

    async def serve() -> None:
        await server.main_loop()
        await server.shutdown(sockets=[sock])

    task = asyncio.create_task(serve(), name="console-http")
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return RunningConsole(f"http://{shown}:{port}/", server, task, watch, clients)
