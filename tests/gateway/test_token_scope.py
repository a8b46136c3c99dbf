"""A world token scoped to tenants and worlds at the gateway: a Submit outside the scope is
PERMISSION_DENIED naming the field, audited as a refused attempt and charged nothing; the world reads
(GetSpend, ListWorlds, ListControls) see only the token's worlds."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_status import rpc_status

from egbe.v1 import gateway_pb2
from gateway.server import build_bundle
from services.auth import Role, Scope, ScopedToken, TokenStore, bearer_metadata
from services.errors import field_violations
from services.server import start_service
from tests.conftest import dialogue_submit
from tests.gateway.harness import GatewayHarness, gateway_settings

SCOPED = "world-token-scoped-to-tenant-a-" + secrets.token_hex(8)
REFUSED = gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED


@pytest.fixture
async def harness(tmp_path: Path, database_url: str | None) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(tmp_path, database_url)
    tokens = {role: secrets.token_urlsafe(24) for role in Role}
    store = TokenStore(
        {
            **{role: [token] for role, token in tokens.items() if role is not Role.WORLD},
            Role.WORLD: [
                tokens[Role.WORLD],
                ScopedToken(SCOPED, Scope(frozenset({"tenant-a"}), ("world-*",))),
            ],
        }
    )
    running = await start_service(
        await build_bundle(settings, store), settings.endpoints["gateway"], store, settings
    )
    harness = GatewayHarness(running, grpc.aio.insecure_channel(running.target), tokens)
    yield harness
    await harness.stop()


def _fields(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)
    assert status is not None
    return [v.field for v in field_violations(status)]


async def test_a_submit_for_another_tenant_is_refused_audited_and_charges_nothing(
    harness: GatewayHarness,
) -> None:
    submit = dialogue_submit("world-1:1:0:dialogue", "ada", "world-1")
    submit.candidate.ori.tenant_id = "tenant-b"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await harness.gateway.Submit(submit, metadata=bearer_metadata(SCOPED))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _fields(refused.value) == ["candidate.ori.tenant_id"]
    assert "tenant 'tenant-b' is not among this token's tenants" in (refused.value.details() or "")
    attempts = await harness.operator.ListOperatorAttempts(
        gateway_pb2.ListOperatorAttemptsRequest(decision=REFUSED), metadata=harness.metadata(Role.OPERATOR)
    )
    [row] = attempts.attempts
    assert (row.method, row.role, row.allowed) == ("Submit", "world", False)
    assert row.operator_id == TokenStore({Role.WORLD: [SCOPED]}).principal_of(f"Bearer {SCOPED}").token_id
    assert row.detail.endswith("(from ipv4:127.0.0.1)")
    spend = await harness.spend()
    assert (spend.reserved_tokens, spend.consumed_tokens) == (0, 0)
    assert await harness.audit_records() == []


async def test_the_world_reads_of_a_scoped_token_stay_in_its_worlds(harness: GatewayHarness) -> None:
    for world in ("world-1", "world-2", "elsewhere"):
        admitted = await harness.admit(f"ada-{world}", world=world)
        await harness.end(admitted.run_id)
    operator = harness.metadata(Role.OPERATOR)
    await harness.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada-world-1", world_id="world-1", reason="r"), metadata=operator
    )
    await harness.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada-elsewhere", world_id="elsewhere", reason="r"),
        metadata=operator,
    )
    await harness.operator.KillTenant(
        gateway_pb2.KillTenantRequest(tenant_id="tenant-b", reason="r"), metadata=operator
    )
    scoped = bearer_metadata(SCOPED)

    worlds = await harness.operator.ListWorlds(gateway_pb2.ListWorldsRequest(), metadata=scoped)
    assert [w.world_id for w in worlds.worlds] == ["world-1", "world-2"]
    everyone = await harness.operator.ListWorlds(
        gateway_pb2.ListWorldsRequest(), metadata=harness.metadata(Role.WORLD)
    )
    assert [w.world_id for w in everyone.worlds] == ["elsewhere", "world-1", "world-2"]

    controls = await harness.operator.ListControls(gateway_pb2.ListControlsRequest(), metadata=scoped)
    assert [(c.target, c.world_id) for c in controls.controls] == [("ada-world-1", "world-1")]

    spend = await harness.operator.GetSpend(
        gateway_pb2.GetSpendRequest(world_id="world-1", tenant_id="tenant-a"), metadata=scoped
    )
    assert spend.consumed_tokens == 0
    for request, field in (
        (gateway_pb2.GetSpendRequest(tenant_id="tenant-a"), "world_id"),
        (gateway_pb2.GetSpendRequest(world_id="elsewhere", tenant_id="tenant-a"), "world_id"),
        (gateway_pb2.GetSpendRequest(world_id="world-1"), "tenant_id"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await harness.operator.GetSpend(request, metadata=scoped)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert _fields(refused.value) == [field]
