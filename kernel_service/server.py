"""Assembles the kernel's service bundle for the chassis, and says which peer targets it lacks."""

from __future__ import annotations

from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelServiceSettings
from kernel_service.dispatcher import Dispatcher
from kernel_service.kernel import Kernel
from kernel_service.metrics import KernelMetrics
from kernel_service.servicer import METHOD_ROLES, KernelServicer
from kernel_service.steward import StewardPolicy
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter
from services.auth import Role, TokenStore
from services.channels import channel_opener
from services.server import ServiceBundle

_KERNEL_SERVICE = kernel_pb2.DESCRIPTOR.services_by_name["KernelService"].full_name
GATEWAY_HEALTH = f"{_KERNEL_SERVICE}/dispatch"
BIOGRAPHY_HEALTH = f"{_KERNEL_SERVICE}/lifecycle"
POLICY_HEALTH = f"{_KERNEL_SERVICE}/steward"

# gRPC health names beside the kernel's own, NOT_SERVING while the kernel lacks that peer's target
# (it still serves ticks), with the note `egbe health` prints, naming the setting that fills it.
UNWIRED_NOTES = {
    GATEWAY_HEALTH: "no gateway: cognition calls are reported, never made; set kernel.gateway_target",
    BIOGRAPHY_HEALTH: (
        "no biography: lifecycle requests are reported, never carried; set kernel.biography_target"
    ),
    POLICY_HEALTH: (
        "no policy: steward directives are answered FAILED_PRECONDITION; set kernel.policy_target"
    ),
}


def _wiring_health(targets: dict[str, str | None]) -> dict[str, str | None]:
    """Each peer target's health part: None when it is set, else the note saying what is lost."""
    return {name: None if target else UNWIRED_NOTES[name] for name, target in targets.items()}


async def build_bundle(settings: KernelServiceSettings, tokens: TokenStore) -> ServiceBundle:
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
    targets = {
        GATEWAY_HEALTH: kernel_settings.gateway_target,
        BIOGRAPHY_HEALTH: kernel_settings.biography_target,
        POLICY_HEALTH: kernel_settings.policy_target,
    }
    token = tokens.token_for(Role.SERVICE) if any(targets.values()) else None
    dial = channel_opener(settings)
    dispatcher = Dispatcher(
        gateway_target=kernel_settings.gateway_target,
        biography_target=kernel_settings.biography_target,
        token=token,
        queue_limit=kernel_settings.dispatch_queue_limit,
        dial=dial,
    )
    await dispatcher.start()
    steward_policy = StewardPolicy(
        kernel_settings.policy_target, token, kernel_settings.policy_timeout_seconds, dial
    )
    metrics = KernelMetrics(core.name, dispatcher.stats, tick_threads=core.ranges.threads)
    tick_log = (
        TickLogWriter(kernel_settings.tick_log_path, kernel, kernel_settings.snapshot_every_ticks)
        if kernel_settings.tick_log_path is not None
        else None
    )

    async def close() -> None:
        await dispatcher.close()
        await steward_policy.close()
        if tick_log is not None:
            tick_log.close()

    return ServiceBundle(
        name="kernel",
        servicers=[
            (
                kernel_pb2_grpc.add_KernelServiceServicer_to_server,
                KernelServicer(kernel, dispatcher, steward_policy, tick_log, metrics),
            )
        ],
        method_roles=METHOD_ROLES,
        close=close,
        metrics=metrics.registry,
        info={
            "core": core.name,
            "tick_threads": str(core.ranges.threads),
            "gateway_target": kernel_settings.gateway_target or "unset",
            "biography_target": kernel_settings.biography_target or "unset",
            "policy_target": kernel_settings.policy_target or "unset",
        },
        health_parts=_wiring_health(targets),
    )
