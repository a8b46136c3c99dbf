"""The operator controls that stopped a run's calls, left over from before the run or thrown during it.

The gateway refuses a call under a control without running it, so no audit record names the control;
the world reads the controls (ListControls, which a world server may call) before and after the run
and attributes to each control the run's calls it matches that were issued while it was in force and
never ran, and those it ended in flight (audit error class "killed"). A call two controls match is
counted for each.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from egbe.v1 import gateway_pb2
from world.artifact import CognitionCall, ControlRecord
from world.clients import ServiceClients
from world.errors import WorldRunError, describe_rpc_error

CONTROL_PAGE = 500
MAX_PAGES = 10_000


@dataclass(frozen=True)
class IssuedCall:
    """One call the kernel issued: its tick, its Ori and its tier, and when (Unix ms) the tick was sent."""

    tick: int
    ori_id: str
    tier: str
    sent_unix_ms: int


async def list_controls(clients: ServiceClients, *, include_inactive: bool) -> list[gateway_pb2.Control]:
    """Every control the gateway holds (only the active ones unless `include_inactive`); empty when the
    gateway lists none (UNIMPLEMENTED)."""
    out: list[gateway_pb2.Control] = []
    token = ""
    for _ in range(MAX_PAGES):
        try:
            page = await clients.operator.ListControls(
                gateway_pb2.ListControlsRequest(
                    include_inactive=include_inactive, page_size=CONTROL_PAGE, page_token=token
                ),
                metadata=clients.world_md,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return out
            raise WorldRunError(describe_rpc_error("ListControls", exc)) from exc
        out.extend(page.controls)
        token = page.next_page_token
        if not token:
            break
    return out


def _iso(stamp: object) -> str:
    return f"{stamp.ToDatetime().isoformat()}Z"  # type: ignore[attr-defined]


def _ms(stamp: object) -> int:
    return int(stamp.ToMilliseconds())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RunScope:
    """What a control must name to touch this run."""

    world_id: str
    tenant_id: str
    started_unix_ms: int


def _targets(control: gateway_pb2.Control, scope: RunScope, call: IssuedCall) -> bool:
    if control.world_id not in ("", scope.world_id):
        return False
    return {
        gateway_pb2.CONTROL_SCOPE_ORI: call.ori_id,
        gateway_pb2.CONTROL_SCOPE_TIER: call.tier,
        gateway_pb2.CONTROL_SCOPE_TENANT: scope.tenant_id,
        gateway_pb2.CONTROL_SCOPE_WORLD: scope.world_id,
    }.get(control.scope) == control.target


def _in_force(control: gateway_pb2.Control, at_ms: int) -> bool:
    if _ms(control.created_at) > at_ms:
        return False
    return not control.HasField("expires_at") or at_ms < _ms(control.expires_at)


def stopping_controls(
    before: list[gateway_pb2.Control],
    after: list[gateway_pb2.Control],
    scope: RunScope,
    issued: list[IssuedCall],
    calls: list[CognitionCall],
) -> list[ControlRecord]:
    """The controls (active when the run began, or created since) that stopped at least one of its calls."""
    left_over = {c.control_id for c in before}
    candidates = {c.control_id: c for c in before}
    for c in after:
        if c.control_id in left_over or _ms(c.created_at) >= scope.started_unix_ms:
            candidates[c.control_id] = c
    ran = {(c.issued_at_tick, c.ori_id) for c in calls if c.outcome != "stopped"}
    killed = [c for c in calls if c.error_class == "killed"]
    out = []
    for control in sorted(candidates.values(), key=lambda c: (_ms(c.created_at), c.control_id)):
        refused = sum(
            1
            for call in issued
            if (call.tick, call.ori_id) not in ran
            and _in_force(control, call.sent_unix_ms)
            and _targets(control, scope, call)
        )
        ended = sum(
            1
            for c in killed
            if _targets(control, scope, IssuedCall(c.issued_at_tick or 0, c.ori_id, c.tier, 0))
        )
        if refused + ended == 0:
            continue
        out.append(
            ControlRecord(
                control_id=control.control_id,
                kind=gateway_pb2.ControlKind.Name(control.kind).removeprefix("CONTROL_KIND_").lower(),
                scope=gateway_pb2.ControlScope.Name(control.scope).removeprefix("CONTROL_SCOPE_").lower(),
                target=control.target,
                world_id=control.world_id,
                reason=control.reason,
                operator_id=control.operator_id,
                created_at=_iso(control.created_at),
                expires_at=_iso(control.expires_at) if control.HasField("expires_at") else None,
                left_over=control.control_id in left_over,
                calls_stopped=refused + ended,
            )
        )
    return out
