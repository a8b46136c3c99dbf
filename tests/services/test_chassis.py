"""The chassis around every handler, over a real socket: token, role, refusal hook and error mapping.

Servicers register through the chassis, which wraps each method handler once; generated code
registers both a registered-method table and a generic handler, and either path must be guarded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status

from assembly.settings import load_settings
from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import Principal, Role, TokenStore, bearer_metadata
from services.errors import EgbeError, InvalidArgument, field_violations
from services.server import RunningService, ServiceBundle, start_service
from services.settings import Endpoint

SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
METHOD = f"/{SERVICE}/EvaluateBudget"
TOKENS = {role: f"{role.value}-token-for-chassis-test" for role in Role}
UNLUCKY = 13


class _Budget(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Any
    ) -> gateway_pb2.EvaluateBudgetResponse:
        if request.world_cap_tokens == UNLUCKY:
            raise InvalidArgument.field("world_cap_tokens", "is unlucky")
        return gateway_pb2.EvaluateBudgetResponse(world_cap_tokens=request.world_cap_tokens)


def _generic_only(servicer: _Budget, server: Any) -> None:
    """How older generated code registers: a generic handler alone."""
    handler = grpc.unary_unary_rpc_method_handler(
        servicer.EvaluateBudget,
        request_deserializer=gateway_pb2.EvaluateBudgetRequest.FromString,
        response_serializer=gateway_pb2.EvaluateBudgetResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"EvaluateBudget": handler}),)
    )


REGISTRATIONS: dict[str, Callable[[Any, Any], None]] = {
    "generated": gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server,
    "generic-only": _generic_only,
}


@pytest.fixture(params=sorted(REGISTRATIONS))
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningService, list[tuple[str, str, Principal | None]]]]:
    refused: list[tuple[str, str, Principal | None]] = []

    def on_refused(method: str, error: EgbeError, principal: Principal | None, peer: str) -> None:
        assert peer.startswith(("ipv4:127.0.0.1:", "ipv6:[::1]:")), peer
        refused.append((method, error.reason, principal))

    tokens = TokenStore({role: [token] for role, token in TOKENS.items()})
    bundle = ServiceBundle(
        name="gateway",
        servicers=[(REGISTRATIONS[request.param], _Budget())],
        method_roles={SERVICE: {"EvaluateBudget": frozenset({Role.SERVICE})}},
        on_refused=on_refused,
    )
    settings = load_settings(data_dir=tmp_path)
    running = await start_service(bundle, Endpoint(port=0), tokens, settings)
    yield running, refused
    await running.stop()


async def _call(target: str, role: Role | None, cap: int = 7) -> tuple[grpc.StatusCode, Any]:
    metadata = bearer_metadata(TOKENS[role]) if role else ()
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            reply = await gateway_pb2_grpc.CognitionGatewayServiceStub(channel).EvaluateBudget(
                gateway_pb2.EvaluateBudgetRequest(world_cap_tokens=cap), metadata=metadata, timeout=5
            )
        except grpc.aio.AioRpcError as error:
            return error.code(), error
    return grpc.StatusCode.OK, reply


async def test_each_call_is_authenticated_authorized_and_mapped_on_either_registration(
    served: tuple[RunningService, list[tuple[str, str, Principal | None]]],
) -> None:
    running, refused = served
    code, reply = await _call(running.target, Role.SERVICE)
    assert code == grpc.StatusCode.OK
    assert reply.world_cap_tokens == 7
    assert (await _call(running.target, None))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert (await _call(running.target, Role.WORLD))[0] == grpc.StatusCode.PERMISSION_DENIED
    code, error = await _call(running.target, Role.SERVICE, cap=UNLUCKY)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(error)
    assert status is not None
    assert [v.field for v in field_violations(status)] == ["world_cap_tokens"]
    # The hook hears both refusals, with the principal when a known token was presented.
    assert [(method, reason) for method, reason, _ in refused] == [
        (METHOD, "UNAUTHENTICATED"),
        (METHOD, "PERMISSION_DENIED"),
    ]
    anonymous, world = (principal for _, _, principal in refused)
    assert anonymous is None
    assert world is not None
    assert world.role is Role.WORLD
    assert world.token_id.startswith("world:")
    assert TOKENS[Role.WORLD] not in world.token_id
    # Later calls keep being checked (each handler is wrapped once, the check runs per call).
    assert (await _call(running.target, Role.WORLD))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert (await _call(running.target, Role.SERVICE))[0] == grpc.StatusCode.OK
