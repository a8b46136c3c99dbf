"""Starts the operator console beside services: the ones this process runs (`egbe up`, `egbe demo`'s
own), or the ones a running `egbe up` published (`egbe console`). The console reads with the operator
token of the services' tokens file and sends every control with the signed-in operator's own."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence

from assembly.settings import EgbeSettings
from console.serving import RunningConsole, start_console
from services.auth import Role, TokenStore
from services.logging import get_logger
from services.runtime import client_tokens, endpoints_path, operator_target, published_targets
from services.server import OPERATOR_SERVICE, RunningService
from services.settings import ChassisSettings

log = get_logger(__name__)

# The console's name in the published endpoints file (`<data_dir>/endpoints.json`): its URL.
CONSOLE_ENDPOINT = "console"


def _reader_token(tokens: TokenStore) -> str:
    return tokens.token_for(Role.OPERATOR)


async def console_beside(
    settings: EgbeSettings, running: Sequence[RunningService], tokens: TokenStore
) -> RunningConsole:
    """The console for services this process started (OperatorService on its own listener when the
    gateway has one)."""
    by_name = {service.bundle.name: service for service in running}
    gateway = by_name["gateway"]
    operator = next(
        (side.target for side in gateway.listeners[1:] if OPERATOR_SERVICE in side.exposed), gateway.target
    )
    console = await start_console(settings, operator, by_name["biography"].target, _reader_token(tokens))
    log.info("console serving", url=console.url)
    return console


async def console_for_published(settings: EgbeSettings) -> RunningConsole:
    """The console for the services a running `egbe up` published, else those the settings name."""
    console = await start_console(
        settings,
        operator_target(settings),
        published_targets(settings)["biography"],
        _reader_token(client_tokens(settings)),
    )
    log.info("console serving", url=console.url)
    return console


def published_console(settings: ChassisSettings) -> str | None:
    """The URL of the console a running `egbe up` serves, if it published one."""
    path = endpoints_path(settings)
    if not path.is_file():
        return None
    url = json.loads(path.read_text()).get(CONSOLE_ENDPOINT)
    return url if isinstance(url, str) else None


async def serve_console_until_signalled(settings: EgbeSettings) -> None:
    """`egbe console`: serve until SIGTERM or SIGINT."""
    console = await console_for_published(settings)
    print(f"console    {console.url}", flush=True)
    await wait_for_stop()
    await console.stop()


async def wait_for_stop() -> None:
    """Return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
