"""What a service process does around its services: the event loop, the tokens, the published
endpoints file, and waiting for the signal that stops it. Which services start, and how, is the
composition root's (`assembly.launcher`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from services.auth import TokenStore, ensure_embedded_tokens
from services.files import private_dir, refuse_shared_secret
from services.logging import get_logger
from services.server import OPERATOR_SERVICE, RunningService, metrics_host
from services.settings import SERVICE_NAMES, ChassisSettings, Mode, UserError

log = get_logger(__name__)

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a process's top coroutine on uvloop: grpc.aio wakes the loop for every call, and libuv's
    loop does that for less CPU than asyncio's default one (bench/gateway_overhead.py shows by how much)."""
    return uvloop.run(main)


def load_tokens(settings: ChassisSettings) -> TokenStore:
    """A server's tokens: the configured file; in embedded mode, generated on first start.

    Only `egbe up` and `egbe serve` may create tokens; a client reads them with `client_tokens`."""
    if settings.tokens_file is not None:
        if not settings.tokens_file.is_file():
            raise UserError(
                f"EGBE_TOKENS_FILE: tokens file {settings.tokens_file} does not exist; point "
                "EGBE_TOKENS_FILE at the {role: token} JSON file the services use"
            )
        try:
            if settings.mode is Mode.PRODUCTION:
                refuse_shared_secret(settings.tokens_file, "tokens file")
            return TokenStore.load(settings.tokens_file)
        except (PermissionError, ValueError) as exc:
            raise UserError(f"EGBE_TOKENS_FILE: {exc}") from None
    if settings.mode is Mode.PRODUCTION:
        raise UserError(
            "tokens_file is required in production mode; set EGBE_TOKENS_FILE to a {role: token} JSON file"
        )
    try:
        return ensure_embedded_tokens(embedded_tokens_path(settings))
    except (OSError, ValueError) as exc:
        raise UserError(str(exc)) from None


def client_tokens(settings: ChassisSettings) -> TokenStore:
    """A client's tokens: the configured file, or the one a running `egbe up` wrote; never created here."""
    path = embedded_tokens_path(settings)
    if settings.tokens_file is None and settings.mode is Mode.EMBEDDED and not path.is_file():
        raise UserError(
            f"no tokens at {path.absolute()}: start the services with this data dir "
            f"(egbe --data-dir {settings.data_dir} up), or set EGBE_TOKENS_FILE to the tokens file they use"
        )
    return load_tokens(settings)


def embedded_tokens_path(settings: ChassisSettings) -> Path:
    return settings.data_dir / "tokens.json"


def endpoints_path(settings: ChassisSettings) -> Path:
    return settings.data_dir / "endpoints.json"


def published_targets(settings: ChassisSettings) -> dict[str, str]:
    """Where each service can be dialled: what a running `egbe up` published, else the settings."""
    targets = {name: endpoint.target() for name, endpoint in settings.endpoints.items()}
    path = endpoints_path(settings)
    if path.is_file():
        published = json.loads(path.read_text())
        targets.update({name: published[name] for name in SERVICE_NAMES if name in published})
    return targets


def operator_target(settings: ChassisSettings) -> str:
    """Where OperatorService answers: its own listener when `operator_endpoint` is set, else the gateway's."""
    path = endpoints_path(settings)
    published = json.loads(path.read_text()) if path.is_file() else {}
    if OPERATOR_SERVICE in published:
        return str(published[OPERATOR_SERVICE])
    if settings.operator_endpoint is not None:
        return settings.operator_endpoint.target()
    return published_targets(settings)["gateway"]


# endpoints.json names a service's Prometheus endpoint (a URL) under "metrics:<service>".
METRICS_PREFIX = "metrics:"


def publish_endpoints(
    settings: ChassisSettings, running: Sequence[RunningService], extra: Mapping[str, str] | None = None
) -> None:
    """Write where each running service (and each side listener) answers, for clients to find; `extra`
    names other listeners of this process (e.g. {"edge": "127.0.0.1:50057"})."""
    path = endpoints_path(settings)
    private_dir(path.parent)
    existing = json.loads(path.read_text()) if path.is_file() else {}
    for service in running:
        existing[service.bundle.name] = service.target
        # Side listeners (e.g. OperatorService alone) are published under their gRPC service name.
        existing.update({name: side.target for side in service.listeners[1:] for name in side.exposed})
        if service.metrics is not None:
            host = metrics_host(settings.endpoints[service.bundle.name])
            existing[f"{METRICS_PREFIX}{service.bundle.name}"] = (
                f"http://{host}:{service.metrics.port}/metrics"
            )
    existing.update(extra or {})
    existing["pid"] = os.getpid()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(existing, indent=2) + "\n")
    tmp.replace(path)


def unpublish_endpoints(settings: ChassisSettings) -> None:
    """Remove the endpoints file if this process published it, so nobody dials a dead server."""
    path = endpoints_path(settings)
    if path.is_file() and json.loads(path.read_text()).get("pid") == os.getpid():
        path.unlink()


async def wait_for_signal(running: Sequence[RunningService], settings: ChassisSettings) -> None:
    """Log what serves (and what each service cannot do yet), then return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "egbe serving",
        services=[r.bundle.name for r in running],
        endpoints={r.bundle.name: r.target for r in running},
    )
    for service in running:
        for part, down in service.bundle.health_parts.items():
            if down is not None:
                log.warning(f"{service.bundle.name} serves, but {down}", health=part)
    await stop.wait()
    log.info("shutting down", grace_seconds=settings.shutdown_grace_seconds)
