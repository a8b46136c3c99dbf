"""Identities on registration: recorded in the biography before the kernel registers anyone.

A RegisterAgents request that carries identities is checked whole against the kernel first; the
biography then records every identity (idempotent, so a retry after any failure is safe); only then
does the kernel register the Ori. A refusal or an unreachable biography leaves the kernel as it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import grpc

from egbe.v1 import biography_pb2, kernel_pb2
from kernel_service.dispatcher import Dispatcher
from kernel_service.errors import (
    BiographyRefused,
    BiographyUnreachable,
    IdentitiesInvalid,
    KernelError,
    NoBiography,
)
from kernel_service.kernel import Kernel
from services.errors import FieldViolation, InvalidArgument, peer_violations

_UNREACHABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
_REGISTRATION_PATH = re.compile(r"registrations\[(\d+)\](.*)")


async def record_identities(
    kernel: Kernel, dispatcher: Dispatcher, request: kernel_pb2.RegisterAgentsRequest
) -> None:
    """Record the identities `request` carries (none: nothing to do), or raise and change nothing."""
    carried = [index for index, agent in enumerate(request.agents) if agent.HasField("identity")]
    if not carried:
        return
    kernel.check_registration(request.world_id, request.agents)
    first: dict[str, int] = {}
    for index in carried:
        ori_id = request.agents[index].ori.ori_id
        if ori_id in first:
            raise InvalidArgument.field(
                f"agents[{index}].identity", f"agents[{first[ori_id]}] already gives {ori_id!r} an identity"
            )
        first[ori_id] = index
    if dispatcher.biography_target is None:
        raise NoBiography(f"agents[{carried[0]}].identity")
    world_tick = 0 if kernel.last_tick is None else kernel.last_tick + 1
    registrations = [
        biography_pb2.IdentityRegistration(
            ori_id=request.agents[index].ori.ori_id,
            identity=request.agents[index].identity,
            world_tick=world_tick,
        )
        for index in carried
    ]
    try:
        await dispatcher.register_identities(registrations)
    except grpc.aio.AioRpcError as error:
        raise _refusal(error, carried) from error


def _refusal(error: grpc.aio.AioRpcError, carried: Sequence[int]) -> KernelError:
    """The biography's refusal as the kernel's: its field paths re-rooted under `agents[i]`."""
    code = error.code()
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        violations = [_reroot(v, carried) for v in peer_violations(error)]
        return IdentitiesInvalid(violations or [FieldViolation("agents", f"biography: {error.details()}")])
    if code in _UNREACHABLE:
        return BiographyUnreachable(code.name)
    return BiographyRefused(code.name, str(error.details()))


def _reroot(violation: FieldViolation, carried: Sequence[int]) -> FieldViolation:
    """`registrations[j].identity.x` -> `agents[i].identity.x` (`.ori_id` -> `.ori.ori_id`)."""
    matched = _REGISTRATION_PATH.fullmatch(violation.field)
    if matched is None or int(matched.group(1)) >= len(carried):
        return FieldViolation("agents", f"{violation.field}: {violation.description}")
    agent, rest = carried[int(matched.group(1))], matched.group(2)
    rest = ".ori.ori_id" if rest == ".ori_id" else rest if rest.startswith(".identity") else ".identity"
    return FieldViolation(f"agents[{agent}]{rest}", violation.description)
