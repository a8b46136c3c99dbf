"""Starts services in this process, the kernel wired to the others, and stops them; `egbe up` and
`egbe serve` run them until a signal."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Sequence

from assembly.console_host import CONSOLE_ENDPOINT, console_beside
from assembly.settings import EgbeSettings
from edge.server import EDGE_ENDPOINT, start_edge
from services import tracing
from services.auth import TokenStore
from services.files import private_dir
from services.runtime import load_tokens, publish_endpoints, unpublish_endpoints, wait_for_signal
from services.server import RunningService, ServiceBundle, start_service
from services.settings import SERVICE_NAMES

BundleBuilder = Callable[[EgbeSettings, TokenStore], Awaitable[ServiceBundle]]

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


async def start_services(
    names: Sequence[str], settings: EgbeSettings, *, publish: bool = True
) -> list[RunningService]:
    """Build and start the named services, the kernel wired to the others; on failure, stop what started.

    The data directory is created owner-only before any service writes a database into it."""
    tokens = load_tokens(settings)
    private_dir(settings.data_dir)
    tracing.configure(settings.otel_endpoint, settings.trace_sample_ratio)
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
    if publish:
        publish_endpoints(settings, running)
    return running


async def stop_services(running: Sequence[RunningService], settings: EgbeSettings) -> None:
    await asyncio.gather(*(service.stop() for service in running))
    await asyncio.to_thread(tracing.flush)
    if running:
        unpublish_endpoints(settings)


async def serve_until_signalled(
    names: Sequence[str], settings: EgbeSettings, *, edge: bool = False, console: bool = False
) -> None:
    """Run until SIGTERM or SIGINT, then drain in-flight calls and stop; with `edge`, the HTTP/JSON and
    WebSocket edge serves the started services too, and with `console` the operator console; both stop
    first."""
    running = await start_services(names, settings, publish=False)
    served = shown = None
    try:
        served = await start_edge(settings, {r.bundle.name: r.target for r in running}) if edge else None
        shown = await console_beside(settings, running, load_tokens(settings)) if console else None
    except BaseException:
        if served is not None:
            await served.stop()
        await stop_services(running, settings)
        raise
    # Published once everything listens: a client that finds the file finds every listener in it.
    extra = {EDGE_ENDPOINT: served.target} if served is not None else {}
    if shown is not None:
        extra[CONSOLE_ENDPOINT] = shown.url
    publish_endpoints(settings, running, extra or None)
    await wait_for_signal(running, settings)
    if shown is not None:
        await shown.stop()
    if served is not None:
        await served.stop()
    await stop_services(running, settings)
