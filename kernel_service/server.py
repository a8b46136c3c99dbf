"""Assembles the kernel's service bundle for the chassis, and says which dispatch targets it lacks."""

from __future__ import annotations

from prometheus_client import start_http_server

from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.dispatcher import Dispatcher
from kernel_service.kernel import Kernel
from kernel_service.metrics import KernelMetrics
from kernel_service.servicer import METHOD_ROLES, KernelServicer
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter
from services.auth import Role, TokenStore
from services.channels import channel_opener
from services.server import ServiceBundle, metrics_host
from services.settings import EgbeSettings

_KERNEL_SERVICE = kernel_pb2.DESCRIPTOR.services_by_name["KernelService"].full_name
GATEWAY_HEALTH = f"{_KERNEL_SERVICE}/dispatch"
BIOGRAPHY_HEALTH = f"{_KERNEL_SERVICE}/lifecycle"

# gRPC health names beside the kernel's own, NOT_SERVING while the dispatcher lacks that target (the
# kernel still serves ticks), with the note `egbe health` prints, naming the setting that fills it.
UNWIRED_NOTES = {
    GATEWAY_HEALTH: "no gateway: cognition calls are reported, never made; set kernel.gateway_target",
    BIOGRAPHY_HEALTH: (
        "no biography: lifecycle requests are reported, never carried; set kernel.biography_target"
    ),
}


def _dispatch_health(gateway_target: str | None, biography_target: str | None) -> dict[str, str | None]:
    """Each dispatch target's health part: None when it is set, else the note saying what is lost."""
    targets = {GATEWAY_HEALTH: gateway_target, BIOGRAPHY_HEALTH: biography_target}
    return {name: None if target else UNWIRED_NOTES[name] for name, target in targets.items()}


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    kernel_settings = settings.kernel
    core = select_core(
        configured=kernel_settings.core,
        tick_threads=kernel_settings.tick_threads,
        tick_threads_min_agents=kernel_settings.tick_threads_min_agents,
    )
    behavior = (
        PersonalityBehaviorLayer(kernel_settings.config.behavior) if kernel_settings.behavior_layer else None
    )
    kernel = Kernel(kernel_settings.config, core, behavior)
    dispatcher = Dispatcher(
        gateway_target=kernel_settings.gateway_target,
        biography_target=kernel_settings.biography_target,
        token=(
            tokens.token_for(Role.SERVICE)
            if kernel_settings.gateway_target or kernel_settings.biography_target
            else None
        ),
        queue_limit=kernel_settings.dispatch_queue_limit,
        dial=channel_opener(settings),
    )
    await dispatcher.start()
    metrics = KernelMetrics(core.name, dispatcher.stats, tick_threads=core.ranges.threads)
    if kernel_settings.metrics_port:
        start_http_server(
            kernel_settings.metrics_port, metrics_host(settings.endpoints["kernel"]), metrics.registry
        )
    tick_log = (
        TickLogWriter(kernel_settings.tick_log_path, kernel, kernel_settings.snapshot_every_ticks)
        if kernel_settings.tick_log_path is not None
        else None
    )

    async def close() -> None:
        await dispatcher.close()
        if tick_log is not None:
            tick_log.close()

    return ServiceBundle(
        name="kernel",
        servicers=[
            (
                kernel_pb2_grpc.add_KernelServiceServicer_to_server,
                KernelServicer(kernel, dispatcher, tick_log, metrics),
            )
        ],
        method_roles=METHOD_ROLES,
        close=close,
        info={
            "core": core.name,
            "tick_threads": str(core.ranges.threads),
            "gateway_target": kernel_settings.gateway_target or "unset",
            "biography_target": kernel_settings.biography_target or "unset",
        },
        health_parts=_dispatch_health(kernel_settings.gateway_target, kernel_settings.biography_target),
    )
