"""Operator controls over gRPC: durable, checked at every boundary, operator-only, every attempt audited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from egbe.v1 import action_pb2, common_pb2, gateway_pb2
from services.auth import Role, TokenStore
from services.local_cluster import free_ports
from services.settings import Endpoint
from tests.gateway.harness import (
    ATROPOS,
    CLOTHO,
    LACHESIS,
    GatewayHarness,
    gateway_settings,
    start_gateway,
)


async def _kill_ori(harness: GatewayHarness, ori: str) -> gateway_pb2.KillOriResponse:
    reply: gateway_pb2.KillOriResponse = await harness.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id=ori, reason="runaway dialogue"),
        metadata=(*harness.metadata(Role.OPERATOR), ("x-egbe-operator", "alice")),
    )
    return reply


def _token_id(harness: GatewayHarness, role: Role) -> str:
    return TokenStore({role: [harness.tokens[role]]}).principal_of(f"Bearer {harness.tokens[role]}").token_id


async def test_kill_ori_ends_its_runs_and_refuses_new_ones(gateway: GatewayHarness) -> None:
    run = await gateway.admit("ada")
    other = await gateway.admit("bram")
    killed = await _kill_ori(gateway, "ada")
    assert killed.runs_aborted == 1
    assert killed.control.operator_id == "alice"
    assert killed.control.active

    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await gateway.generate(run.run_id)
    assert stopped.value.code() == grpc.StatusCode.ABORTED
    assert killed.control.control_id in (stopped.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.admit("ada")
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert "kill ori 'ada'" in (refused.value.details() or "")

    assert (await gateway.generate(other.run_id)).offline  # other Ori are untouched
    spend = await gateway.spend("world-1")
    assert spend.reserved_tokens + spend.consumed_tokens == 4_000  # only bram's reservation is still held
    # ada's run ended in flight and her later admission refused: two kills, one of them in flight
    assert (spend.admissions, spend.killed, spend.killed_in_flight) == (2, 2, 1)


@pytest.mark.parametrize(
    ("scope", "target", "hit", "spared"),
    [
        (
            gateway_pb2.CONTROL_SCOPE_TIER,
            "lachesis",
            ("ada", LACHESIS, "tenant-a"),
            ("ada", CLOTHO, "tenant-a"),
        ),
        (
            gateway_pb2.CONTROL_SCOPE_TENANT,
            "tenant-b",
            ("cyd", ATROPOS, "tenant-b"),
            ("cyd", ATROPOS, "tenant-a"),
        ),
    ],
)
async def test_pause_and_resume_by_scope(
    gateway: GatewayHarness, scope: int, target: str, hit: tuple[str, int, str], spared: tuple[str, int, str]
) -> None:
    operator = gateway.metadata(Role.OPERATOR)
    running = await gateway.admit(hit[0], hit[1], tenant=hit[2])
    await gateway.operator.Pause(
        gateway_pb2.PauseRequest(scope=scope, target=target, reason="maintenance"),  # type: ignore[arg-type]
        metadata=operator,
    )
    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await gateway.generate(running.run_id)
    assert stopped.value.code() == grpc.StatusCode.ABORTED
    with pytest.raises(grpc.aio.AioRpcError):
        await gateway.admit(hit[0], hit[1], tenant=hit[2])
    assert (await gateway.admit(spared[0], spared[1], tenant=spared[2])).admitted

    resumed = await gateway.operator.Resume(
        gateway_pb2.ResumeRequest(scope=scope, target=target, reason="done"),  # type: ignore[arg-type]
        metadata=operator,
    )
    assert [c.kind for c in resumed.lifted] == [gateway_pb2.CONTROL_KIND_PAUSE]
    assert (await gateway.admit(hit[0], hit[1], tenant=hit[2])).admitted


async def test_kill_tier_and_quarantine_show_in_list_controls(gateway: GatewayHarness) -> None:
    operator = gateway.metadata(Role.OPERATOR)
    tier = await gateway.operator.KillTier(
        gateway_pb2.KillTierRequest(tier=ATROPOS, reason="cost spike"), metadata=operator
    )
    assert tier.control.target == "atropos"
    await gateway.operator.Quarantine(
        gateway_pb2.QuarantineRequest(scope=gateway_pb2.CONTROL_SCOPE_ORI, target="eve", reason="review"),
        metadata=operator,
    )
    await gateway.operator.KillTenant(
        gateway_pb2.KillTenantRequest(tenant_id="t9", reason="x"), metadata=operator
    )
    first = await gateway.operator.ListControls(
        gateway_pb2.ListControlsRequest(page_size=2), metadata=operator
    )
    rest = await gateway.operator.ListControls(
        gateway_pb2.ListControlsRequest(page_size=2, page_token=first.next_page_token), metadata=operator
    )
    kinds = [(c.kind, c.scope, c.target) for c in [*first.controls, *rest.controls]]
    assert kinds == [
        (gateway_pb2.CONTROL_KIND_KILL, gateway_pb2.CONTROL_SCOPE_TIER, "atropos"),
        (gateway_pb2.CONTROL_KIND_QUARANTINE, gateway_pb2.CONTROL_SCOPE_ORI, "eve"),
        (gateway_pb2.CONTROL_KIND_KILL, gateway_pb2.CONTROL_SCOPE_TENANT, "t9"),
    ]
    assert rest.next_page_token == ""


async def test_controls_need_a_reason_and_a_real_target(gateway: GatewayHarness) -> None:
    operator = gateway.metadata(Role.OPERATOR)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.operator.KillOri(gateway_pb2.KillOriRequest(ori_id="ada"), metadata=operator)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.operator.KillTier(gateway_pb2.KillTierRequest(reason="r"), metadata=operator)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    listed = await gateway.operator.ListControls(gateway_pb2.ListControlsRequest(), metadata=operator)
    assert list(listed.controls) == []  # nothing half-applied


async def _attempts(harness: GatewayHarness, **filters: object) -> list[gateway_pb2.OperatorAttempt]:
    """Every page of ListOperatorAttempts (3 a page, so pagination is exercised)."""
    attempts: list[gateway_pb2.OperatorAttempt] = []
    token = ""
    for _ in range(100):
        page = await harness.operator.ListOperatorAttempts(
            gateway_pb2.ListOperatorAttemptsRequest(page_size=3, page_token=token, **filters),  # type: ignore[arg-type]
            metadata=(*harness.metadata(Role.OPERATOR), ("x-egbe-operator", "carol")),
        )
        attempts.extend(page.attempts)
        token = page.next_page_token
        if not token:
            return attempts
    raise AssertionError("operator-attempt pagination did not end")


async def test_only_operators_control_and_every_attempt_is_audited_and_readable(
    gateway: GatewayHarness,
) -> None:
    for role in (Role.SERVICE, Role.WORLD):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gateway.operator.KillOri(
                gateway_pb2.KillOriRequest(ori_id="ada", reason="r"), metadata=gateway.metadata(role)
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await gateway.operator.KillTier(gateway_pb2.KillTierRequest(tier=CLOTHO, reason="r"))
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as reader:
        await gateway.operator.ListOperatorAttempts(
            gateway_pb2.ListOperatorAttemptsRequest(), metadata=gateway.metadata(Role.SERVICE)
        )
    assert reader.value.code() == grpc.StatusCode.PERMISSION_DENIED
    await _kill_ori(gateway, "ada")

    # Three pages of three: each page's read is itself recorded before the page is read.
    everything = await _attempts(gateway)
    assert [(a.seq, a.method, a.allowed) for a in everything] == [
        (1, "KillOri", False),
        (2, "KillOri", False),
        (3, "KillTier", False),
        (4, "ListOperatorAttempts", False),
        (5, "KILL:ORI", True),
        (6, "ListOperatorAttempts", True),
        (7, "ListOperatorAttempts", True),
        (8, "ListOperatorAttempts", True),
    ]
    assert everything[4].operator_id == "alice"
    assert everything[4].detail == "ada: runaway dialogue"
    assert everything[5].operator_id == "carol"
    assert all(a.recorded_at.seconds > 0 for a in everything)

    refused = await _attempts(gateway, decision=gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED)
    # Who attempted each refused call: the role and token id of the token presented, never the token.
    service_id, world_id = (_token_id(gateway, role) for role in (Role.SERVICE, Role.WORLD))
    assert [(a.seq, a.role, a.operator_id) for a in refused] == [
        (1, "service", service_id),
        (2, "world", world_id),
        (3, "unauthenticated", ""),
        (4, "service", service_id),
    ]
    assert service_id.startswith("service:")
    assert service_id != world_id
    assert not any(token in a.operator_id + a.detail for a in refused for token in gateway.tokens.values())
    assert "token" in refused[2].detail  # the anonymous call: why it was refused
    mine = await _attempts(gateway, operator_id=world_id)
    assert [(a.seq, a.method) for a in mine] == [(2, "KillOri")]
    allowed_kills = await _attempts(
        gateway,
        decision=gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED,
        method="KILL:ORI",
        operator_id="alice",
    )
    assert [a.seq for a in allowed_kills] == [5]
    assert await _attempts(gateway, operator_id="nobody") == []

    for bad, field in (
        (gateway_pb2.ListOperatorAttemptsRequest(page_token="not-a-token"), "page_token"),
        (gateway_pb2.ListOperatorAttemptsRequest(decision=7), "decision"),  # type: ignore[arg-type]
        (gateway_pb2.ListOperatorAttemptsRequest(page_size=-1), "page_size"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await gateway.operator.ListOperatorAttempts(bad, metadata=gateway.metadata(Role.OPERATOR))
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (invalid.value.details() or "")


async def test_a_control_request_its_checks_refuse_is_audited_as_refused(gateway: GatewayHarness) -> None:
    metadata = (*gateway.metadata(Role.OPERATOR), ("x-egbe-operator", "dave"))
    operator = gateway.operator
    ori = gateway_pb2.CONTROL_SCOPE_ORI
    refused_calls: tuple[tuple[str, Callable[[], Awaitable[object]]], ...] = (
        ("KillOri", lambda: operator.KillOri(gateway_pb2.KillOriRequest(ori_id="ada"), metadata=metadata)),
        ("KillTier", lambda: operator.KillTier(gateway_pb2.KillTierRequest(reason="r"), metadata=metadata)),
        (
            "KillTenant",
            lambda: operator.KillTenant(
                gateway_pb2.KillTenantRequest(tenant_id="t" * 200, reason="r"), metadata=metadata
            ),
        ),
        (
            "Pause",
            lambda: operator.Pause(gateway_pb2.PauseRequest(target="ada", reason="r"), metadata=metadata),
        ),
        (
            "Quarantine",
            lambda: operator.Quarantine(
                gateway_pb2.QuarantineRequest(scope=ori, reason="r"), metadata=metadata
            ),
        ),
        (
            "Resume",
            lambda: operator.Resume(gateway_pb2.ResumeRequest(scope=ori, reason="r"), metadata=metadata),
        ),
    )
    told = []
    for _, call in refused_calls:  # one at a time: the attempts are recorded in this order
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await call()
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        told.append(invalid.value.details())
    attempts = await _attempts(gateway, decision=gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED)
    assert [(a.method, a.role, a.operator_id) for a in attempts] == [
        (method, "operator", "dave") for method, _ in refused_calls
    ]
    assert [a.detail for a in attempts] == told  # why each was refused, as its caller was told
    assert "reason" in attempts[0].detail
    assert "tier" in attempts[1].detail
    listed = await operator.ListControls(
        gateway_pb2.ListControlsRequest(include_inactive=True), metadata=gateway.metadata(Role.OPERATOR)
    )
    assert list(listed.controls) == []  # none of them changed anything


async def test_a_kill_stops_a_run_at_its_tool_boundary(gateway: GatewayHarness) -> None:
    run = await gateway.admit("ada")
    await gateway.generate(run.run_id, tool_grants=["biography.recall"])
    killed = await _kill_ori(gateway, "ada")
    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await gateway.gateway.CheckToolCall(
            gateway_pb2.CheckToolCallRequest(run_id=run.run_id, tool_name="biography.recall"),
            metadata=gateway.metadata(Role.SERVICE),
        )
    assert stopped.value.code() == grpc.StatusCode.ABORTED
    assert killed.control.control_id in (stopped.value.details() or "")


async def test_a_restarted_gateway_loads_its_controls_before_serving(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    first = await start_gateway(settings)
    try:
        await _kill_ori(first, "ada")
    finally:
        await first.stop()
    second = await start_gateway(settings)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await second.admit("ada")
        assert refused.value.code() == grpc.StatusCode.ABORTED
        listed = await second.operator.ListControls(
            gateway_pb2.ListControlsRequest(), metadata=second.metadata(Role.OPERATOR)
        )
        assert [c.target for c in listed.controls] == ["ada"]
    finally:
        await second.stop()


async def test_submit_releases_its_reservation_when_think_fails(
    tmp_path: Path, database_url: str | None
) -> None:
    """Nothing serves the cognition endpoint here, so Think fails; the run must not keep its tokens."""
    settings = gateway_settings(tmp_path, database_url)
    endpoints = {**settings.endpoints, "cognition": Endpoint(port=free_ports(1)[0])}
    gateway = await start_gateway(settings.model_copy(update={"endpoints": endpoints}))
    try:
        await _submit_and_fail(gateway)
    finally:
        await gateway.stop()


async def _submit_and_fail(gateway: GatewayHarness) -> None:
    reply = await gateway.gateway.Submit(
        gateway_pb2.SubmitRequest(
            candidate=action_pb2.CognitionCallCandidate(
                ori=common_pb2.OriRef(tenant_id="t", world_id="world-1", ori_id="ada"), tier=CLOTHO, cause=1
            ),
            mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
        ),
        metadata=gateway.metadata(Role.SERVICE),
    )
    assert reply.outcome == gateway_pb2.RUN_OUTCOME_FAILED
    assert "cognition Think failed" in reply.detail
    spend = await gateway.spend("world-1")
    assert (spend.admissions, spend.reserved_tokens) == (1, 0)


async def test_spend_sums_every_window_since_the_one_named(tmp_path: Path, database_url: str | None) -> None:
    """A run that crosses a ledger window sees all its spend when it passes back the first window's start."""
    harness = await start_gateway(gateway_settings(tmp_path, database_url, ledger_window_seconds=1))
    try:

        async def next_window(after: int) -> int:
            while True:  # polled: the window is the gateway's clock, nothing to wait on
                start = (await harness.spend("world-1")).window_start_unix_ms
                if start != after:
                    return start
                await asyncio.sleep(0.01)

        # start just after a boundary, so ada's admission lands in the window `first` names
        first = await next_window(await next_window(0))
        await harness.admit("ada")
        await next_window(first)
        await harness.admit("bram")
        assert (await harness.spend("world-1")).admissions == 1  # the current window alone
        both = await harness.operator.GetSpend(
            gateway_pb2.GetSpendRequest(world_id="world-1", since_unix_ms=first),
            metadata=harness.metadata(Role.OPERATOR),
        )
        assert both.admissions == 2
        assert both.window_start_unix_ms == first
        with pytest.raises(grpc.aio.AioRpcError) as future:
            await harness.operator.GetSpend(
                gateway_pb2.GetSpendRequest(world_id="world-1", since_unix_ms=2**62),
                metadata=harness.metadata(Role.OPERATOR),
            )
        assert future.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "since_unix_ms" in (future.value.details() or "")
    finally:
        await harness.stop()
