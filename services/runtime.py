"""Starts one service or all of them in one process, publishes their endpoints, and stops them on a signal."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from services.auth import TokenStore, ensure_embedded_tokens
from services.files import private_dir, refuse_shared_secret
from services.logging import get_logger
from services.server import OPERATOR_SERVICE, RunningService, ServiceBundle, start_service
from services.settings import SERVICE_NAMES, EgbeSettings, Mode, UserError

log = get_logger(__name__)

BundleBuilder = Callable[[EgbeSettings, TokenStore], Awaitable[ServiceBundle]]
T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a process's top coroutine on uvloop: grpc.aio wakes the loop for every call, and libuv's
    loop does that for less CPU than asyncio's default one (bench/gateway_overhead.py shows by how much)."""
    return uvloop.run(main)


# Each service's package owns its bundle; imported lazily so `egbe serve kernel` loads only the kernel.
BUNDLE_BUILDERS = {
    name: f"{package}.server:build_bundle"
    for name, package in {
        "kernel": "kernel_service",
        "gateway": "gateway",
        "cognition": "cognition_service",
        "policy": "policy_service",
        "biography": "biography_service",
    }.items()
}
assert tuple(BUNDLE_BUILDERS) == SERVICE_NAMES


def builder_for(name: str) -> BundleBuilder:
    module_name, attribute = BUNDLE_BUILDERS[name].split(":")
    builder: BundleBuilder = getattr(importlib.import_module(module_name), attribute)
    return builder


def load_tokens(settings: EgbeSettings) -> TokenStore:
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


def client_tokens(settings: EgbeSettings) -> TokenStore:
    """A client's tokens: the configured file, or the one a running `egbe up` wrote; never created here."""
    path = embedded_tokens_path(settings)
    if settings.tokens_file is None and settings.mode is Mode.EMBEDDED and not path.is_file():
        raise UserError(
            f"no tokens at {path.absolute()}: start the services with this data dir "
            f"(egbe --data-dir {settings.data_dir} up), or set EGBE_TOKENS_FILE to the tokens file they use"
        )
    return load_tokens(settings)


def embedded_tokens_path(settings: EgbeSettings) -> Path:
    return settings.data_dir / "tokens.json"


def endpoints_path(settings: EgbeSettings) -> Path:
    return settings.data_dir / "endpoints.json"


def published_targets(settings: EgbeSettings) -> dict[str, str]:
    """Where each service can be dialled: what a running `egbe up` published, else the settings."""
    targets = {name: endpoint.target() for name, endpoint in settings.endpoints.items()}
    path = endpoints_path(settings)
    if path.is_file():
        published = json.loads(path.read_text())
        targets.update({name: published[name] for name in SERVICE_NAMES if name in published})
    return targets


def operator_target(settings: EgbeSettings) -> str:
    """Where OperatorService answers: its own listener when `operator_endpoint` is set, else the gateway's."""
    path = endpoints_path(settings)
    published = json.loads(path.read_text()) if path.is_file() else {}
    if OPERATOR_SERVICE in published:
        return str(published[OPERATOR_SERVICE])
    if settings.operator_endpoint is not None:
        return settings.operator_endpoint.target()
    return published_targets(settings)["gateway"]


def _publish(settings: EgbeSettings, running: Sequence[RunningService]) -> None:
    path = endpoints_path(settings)
    private_dir(path.parent)
    existing = json.loads(path.read_text()) if path.is_file() else {}
    for service in running:
        existing[service.bundle.name] = service.target
        # Side listeners (e.g. OperatorService alone) are published under their gRPC service name.
        existing.update({name: side.target for side in service.listeners[1:] for name in side.exposed})
    existing["pid"] = os.getpid()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(existing, indent=2) + "\n")
    tmp.replace(path)


# What the kernel dials (its dispatcher the gateway and biography, its steward filter the policy),
# by the service serving it: the setting each one fills.
KERNEL_PEER_TARGETS = {
    "gateway": "gateway_target",
    "biography": "biography_target",
    "policy": "policy_target",
}


def wire_kernel(settings: EgbeSettings, served: dict[str, str]) -> EgbeSettings:
    """Point the kernel at the gateway, biography and policy this process serves.

    A target the settings name is kept (the operator chose it); one not served here stays unset.
    """
    update = {
        setting: served[service]
        for service, setting in KERNEL_PEER_TARGETS.items()
        if service in served and getattr(settings.kernel, setting) is None
    }
    if not update:
        return settings
    return settings.model_copy(update={"kernel": settings.kernel.model_copy(update=update)})


def _start_order(names: Sequence[str]) -> list[str]:
    """The kernel last: it is told where the gateway, biography and policy listen once they do (port 0)."""
    return sorted(names, key=lambda name: name == "kernel")


async def start_services(names: Sequence[str], settings: EgbeSettings) -> list[RunningService]:
    """Build and start the named services, the kernel wired to the others; on failure, stop what started.

    The data directory is created owner-only before any service writes a database into it."""
    tokens = load_tokens(settings)
    private_dir(settings.data_dir)
    running: list[RunningService] = []
    try:
        for name in _start_order(names):
            served = {service.bundle.name: service.target for service in running}
            service_settings = wire_kernel(settings, served) if name == "kernel" else settings
            bundle = await builder_for(name)(service_settings, tokens)
            running.append(await start_service(bundle, settings.endpoints[name], tokens, settings))
    except BaseException:
        await stop_services(running, settings)
        raise
    running.sort(key=lambda service: list(names).index(service.bundle.name))
    _publish(settings, running)
    return running


def _unpublish(settings: EgbeSettings) -> None:
    """Remove the endpoints file if this process published it, so nobody dials a dead server."""
    path = endpoints_path(settings)
    if path.is_file() and json.loads(path.read_text()).get("pid") == os.getpid():
        path.unlink()


async def stop_services(running: Sequence[RunningService], settings: EgbeSettings) -> None:
    await asyncio.gather(*(service.stop() for service in running))
    if running:
        _unpublish(settings)


async def serve_until_signalled(names: Sequence[str], settings: EgbeSettings) -> None:
    """Run until SIGTERM or SIGINT, then drain in-flight calls and stop."""
    running = await start_services(names, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("egbe serving", services=list(names), endpoints={r.bundle.name: r.target for r in running})
    for service in running:
        for part, down in service.bundle.health_parts.items():
            if down is not None:
                log.warning(f"{service.bundle.name} serves, but {down}", health=part)
    await stop.wait()
    log.info("shutting down", grace_seconds=settings.shutdown_grace_seconds)
    await stop_services(running, settings)
