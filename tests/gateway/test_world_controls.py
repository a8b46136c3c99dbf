"""Controls for real worlds over gRPC, on both stores: a world scope and an expiry on every control,
idempotent kills, a Resume of nothing refused, unknown targets warned about, the worlds listed with
GetSpend's figures, a world server's reads kept out of the operator audit, and limits changed at run
time (pushed to a second gateway within a second)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_status import rpc_status

from egbe.v1 import gateway_pb2
from services.auth import Role
from services.errors import field_violations
from tests.gateway.harness import CLOTHO, LACHESIS, GatewayHarness, gateway_settings, start_gateway

EXPIRY_MS = 300


def _fields(error: grpc.aio.AioRpcError) -> list[str]:
    """The fields a refusal's BadRequest names."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    return [v.field for v in field_violations(status)]


PUSH_BOUND_SECONDS = 1.0


def _as_operator(harness: GatewayHarness) -> tuple[tuple[str, str], ...]:
    return (*harness.metadata(Role.OPERATOR), ("x-egbe-operator", "alice"))


async def _kill(
    harness: GatewayHarness, ori: str, *, world: str = "", expires_ms: int = 0
) -> gateway_pb2.KillOriResponse:
    request = gateway_pb2.KillOriRequest(ori_id=ori, reason="runaway", world_id=world)
    if expires_ms:
        request.expires_after.CopyFrom(duration_pb2.Duration(nanos=expires_ms * 1_000_000))
    reply: gateway_pb2.KillOriResponse = await harness.operator.KillOri(
        request, metadata=_as_operator(harness)
    )
    return reply


async def _controls(harness: GatewayHarness, *, everything: bool) -> list[gateway_pb2.Control]:
    reply = await harness.operator.ListControls(
        gateway_pb2.ListControlsRequest(include_inactive=everything), metadata=_as_operator(harness)
    )
    return list(reply.controls)


async def test_a_world_scoped_kill_stops_that_world_only(gateway: GatewayHarness) -> None:
    in_7 = await gateway.admit("adaeze", world="hamlet-7")
    in_8 = await gateway.admit("adaeze", world="hamlet-8")
    killed = await _kill(gateway, "adaeze", world="hamlet-7")
    assert (killed.runs_aborted, killed.control.world_id, killed.existing) == (1, "hamlet-7", False)

    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await gateway.generate(in_7.run_id)
    assert stopped.value.code() == grpc.StatusCode.ABORTED
    assert "kill ori 'adaeze' in world 'hamlet-7'" in (stopped.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.admit("adaeze", world="hamlet-7")
    assert refused.value.code() == grpc.StatusCode.ABORTED

    assert (await gateway.generate(in_8.run_id)).offline  # the same Ori in another world goes on
    assert (await gateway.admit("adaeze", world="hamlet-8")).admitted


async def test_a_world_kill_stops_every_run_of_that_world(gateway: GatewayHarness) -> None:
    await gateway.admit("ada", world="hamlet-7")
    other = await gateway.admit("ada", world="hamlet-8")
    killed = await gateway.operator.KillWorld(
        gateway_pb2.KillWorldRequest(world_id="hamlet-7", reason="griefing"), metadata=_as_operator(gateway)
    )
    assert (killed.runs_aborted, killed.control.scope, killed.warning) == (
        1,
        gateway_pb2.CONTROL_SCOPE_WORLD,
        "",
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.admit("bram", world="hamlet-7")
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert (await gateway.generate(other.run_id)).offline


async def test_an_expired_control_stops_nothing_and_lists_as_expired(gateway: GatewayHarness) -> None:
    killed = await _kill(gateway, "ada", expires_ms=EXPIRY_MS)
    assert (
        killed.control.expires_at.ToMilliseconds() == killed.control.created_at.ToMilliseconds() + EXPIRY_MS
    )
    with pytest.raises(grpc.aio.AioRpcError):
        await gateway.admit("ada")
    await asyncio.sleep(EXPIRY_MS / 1000 + 0.1)

    run = await gateway.admit("ada")
    assert (await gateway.generate(run.run_id)).offline
    assert await _controls(gateway, everything=False) == []
    [listed] = await _controls(gateway, everything=True)
    assert (listed.control_id, listed.active, listed.expired) == (killed.control.control_id, False, True)
    # A kill after the expiry is a new control.
    assert (await _kill(gateway, "ada")).control.control_id != killed.control.control_id


async def test_a_repeated_kill_answers_the_active_control(gateway: GatewayHarness) -> None:
    first = await _kill(gateway, "ada", world="hamlet-7")
    again = await _kill(gateway, "ada", world="hamlet-7")
    assert (again.control.control_id, again.existing, again.runs_aborted) == (
        first.control.control_id,
        True,
        0,
    )
    elsewhere = await _kill(gateway, "ada", world="hamlet-8")  # another world is another control
    assert not elsewhere.existing
    assert [c.control_id for c in await _controls(gateway, everything=True)] == [
        first.control.control_id,
        elsewhere.control.control_id,
    ]


async def test_a_resume_of_nothing_is_not_found_naming_the_target(gateway: GatewayHarness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await gateway.operator.Resume(
            gateway_pb2.ResumeRequest(scope=gateway_pb2.CONTROL_SCOPE_ORI, target="nobody", reason="r"),
            metadata=_as_operator(gateway),
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert "ori 'nobody'" in (missing.value.details() or "")
    assert _fields(missing.value) == ["target"]

    await _kill(gateway, "ada", world="hamlet-7")
    with pytest.raises(grpc.aio.AioRpcError) as other_world:  # only hamlet-7 holds one
        await gateway.operator.Resume(
            gateway_pb2.ResumeRequest(
                scope=gateway_pb2.CONTROL_SCOPE_ORI, target="ada", reason="r", world_id="hamlet-8"
            ),
            metadata=_as_operator(gateway),
        )
    assert other_world.value.code() == grpc.StatusCode.NOT_FOUND
    resumed = await gateway.operator.Resume(
        gateway_pb2.ResumeRequest(scope=gateway_pb2.CONTROL_SCOPE_ORI, target="ada", reason="r"),
        metadata=_as_operator(gateway),
    )
    assert [c.world_id for c in resumed.lifted] == ["hamlet-7"]


async def test_a_kill_of_an_ori_never_seen_is_committed_with_a_warning(gateway: GatewayHarness) -> None:
    run = await gateway.admit("ada", world="hamlet-7")
    await gateway.generate(run.run_id)
    assert (await _kill(gateway, "ada")).warning == ""
    assert (await _kill(gateway, "ada", world="hamlet-7")).warning == ""
    unseen = await _kill(gateway, "adaez")
    assert unseen.warning == "no run of Ori 'adaez' has been seen by this gateway; check the id"
    assert unseen.control.active
    elsewhere = await _kill(gateway, "ada", world="hamlet-9")
    assert "Ori 'ada' in world 'hamlet-9'" in elsewhere.warning


async def test_list_worlds_reports_what_get_spend_reports(gateway: GatewayHarness) -> None:
    for world, oris in (("hamlet-7", ("ada", "bram")), ("hamlet-8", ("cyd",))):
        for ori in oris:
            run = await gateway.admit(ori, LACHESIS, world=world)
            await gateway.generate(run.run_id, mode=gateway_pb2.COGNITION_MODE_REFLECTION)
    await gateway.admit("dell", world="hamlet-8")  # active: its reservation is held
    await _kill(gateway, "ada", world="hamlet-7")
    pages: list[gateway_pb2.WorldSpend] = []
    token = ""
    for _ in range(10):
        page = await gateway.operator.ListWorlds(
            gateway_pb2.ListWorldsRequest(page_size=1, page_token=token), metadata=_as_operator(gateway)
        )
        pages.extend(page.worlds)
        token = page.next_page_token
        if not token:
            break
    assert [w.world_id for w in pages] == ["hamlet-7", "hamlet-8"]
    for world in pages:
        spend = await gateway.spend(world.world_id)
        assert (
            world.world_cap_tokens,
            world.reserved_tokens,
            world.consumed_tokens,
            world.consumed_micro_usd,
            world.calls,
            world.admissions,
            world.killed,
        ) == (
            spend.world_cap_tokens,
            spend.reserved_tokens,
            spend.consumed_tokens,
            spend.consumed_micro_usd,
            sum(t.calls for t in spend.by_tier),
            spend.admissions,
            spend.killed,
        )
    assert [w.calls for w in pages] == [2, 1]
    # (runs not ended hold their reservations: cyd's Lachesis run less what it used, and dell's)
    assert pages[1].reserved_tokens == 16_000 - pages[1].consumed_tokens + 4_000
    assert [[c.target for c in w.active_controls] for w in pages] == [["ada"], []]


async def test_a_world_servers_reads_are_not_operator_attempts(gateway: GatewayHarness) -> None:
    for _ in range(3):
        await gateway.operator.GetSpend(
            gateway_pb2.GetSpendRequest(world_id="hamlet-7"), metadata=gateway.metadata(Role.WORLD)
        )
    await gateway.operator.ListControls(
        gateway_pb2.ListControlsRequest(), metadata=gateway.metadata(Role.WORLD)
    )
    await gateway.operator.ListWorlds(gateway_pb2.ListWorldsRequest(), metadata=gateway.metadata(Role.WORLD))
    await gateway.spend("hamlet-7")  # an operator's read is one
    attempts = await gateway.operator.ListOperatorAttempts(
        gateway_pb2.ListOperatorAttemptsRequest(), metadata=_as_operator(gateway)
    )
    assert [(a.method, a.role) for a in attempts.attempts] == [
        ("GetSpend", "operator"),
        ("ListOperatorAttempts", "operator"),
    ]


async def test_limits_out_of_range_are_refused_naming_the_field(gateway: GatewayHarness) -> None:
    refusals = (
        (
            gateway.operator.SetWorldCap,
            gateway_pb2.SetWorldCapRequest(world_id="w", reason="r"),
            "tokens_per_hour",
        ),
        (
            gateway.operator.SetWorldCap,
            gateway_pb2.SetWorldCapRequest(world_id="w", tokens_per_hour=10**13, reason="r"),
            "tokens_per_hour",
        ),
        (
            gateway.operator.SetRunBudget,
            gateway_pb2.SetRunBudgetRequest(tier=CLOTHO, max_model_calls=5_000, reason="r"),
            "max_model_calls",
        ),
        (
            gateway.operator.SetRunBudget,
            gateway_pb2.SetRunBudgetRequest(tier=CLOTHO, max_tokens=0, reason="r"),
            "max_tokens",
        ),
    )
    for rpc, request, field in refusals:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await rpc(request, metadata=_as_operator(gateway))  # type: ignore[operator]
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _fields(refused.value) == [field]
    assert (await gateway.admit("ada", world="w")).budget.max_model_calls == 2  # nothing applied


async def test_a_cap_and_a_budget_set_are_committed_audited_and_applied(gateway: GatewayHarness) -> None:
    await gateway.admit("ada", world="hamlet-7")
    capped = await gateway.operator.SetWorldCap(
        gateway_pb2.SetWorldCapRequest(world_id="hamlet-7", tokens_per_hour=6_000, reason="demo"),
        metadata=_as_operator(gateway),
    )
    assert capped.world_cap_tokens == 6_000
    assert (await gateway.spend("hamlet-7")).world_cap_tokens == 6_000
    deferred = await gateway.admit("bram", world="hamlet-7")  # 4,000 held + 4,000 more > 6,000
    assert not deferred.admitted
    assert (await gateway.admit("bram", world="hamlet-8")).admitted  # other worlds keep the configured cap

    budget = await gateway.operator.SetRunBudget(
        gateway_pb2.SetRunBudgetRequest(tier=LACHESIS, max_tokens=8_000, reason="cheaper"),
        metadata=_as_operator(gateway),
    )
    assert (budget.budget.max_model_calls, budget.budget.max_tool_calls, budget.budget.max_tokens) == (
        6,
        8,
        8_000,
    )
    admitted = await gateway.admit("cyd", LACHESIS, world="hamlet-8")
    assert (admitted.budget.max_tokens, admitted.reserved_tokens) == (8_000, 8_000)
    attempts = await gateway.operator.ListOperatorAttempts(
        gateway_pb2.ListOperatorAttemptsRequest(decision=gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED),
        metadata=_as_operator(gateway),
    )
    changes = [(a.method, a.detail) for a in attempts.attempts if a.method.startswith("SET:")]
    assert changes == [
        ("SET:WORLD_CAP", "hamlet-7: 6000 tokens/hour: demo"),
        ("SET:RUN_BUDGET", "lachesis: 6 model calls, 8 tool calls, 8000 tokens: cheaper"),
    ]


@pytest.mark.postgres
async def test_a_cap_set_on_one_gateway_applies_on_another_within_a_second(
    tmp_path: Path, postgres_dsn: str
) -> None:
    first = await start_gateway(gateway_settings(tmp_path / "a", postgres_dsn))
    second = await start_gateway(gateway_settings(tmp_path / "b", postgres_dsn))
    try:
        assert (await second.admit("ada", world="hamlet-7")).admitted  # (its lease: the configured cap)
        started = time.monotonic()
        await first.operator.SetWorldCap(
            gateway_pb2.SetWorldCapRequest(world_id="hamlet-7", tokens_per_hour=6_000, reason="demo"),
            metadata=_as_operator(first),
        )
        await first.operator.SetRunBudget(
            gateway_pb2.SetRunBudgetRequest(tier=LACHESIS, max_model_calls=3, reason="demo"),
            metadata=_as_operator(first),
        )
        while (await second.spend("hamlet-7")).world_cap_tokens != 6_000:
            assert time.monotonic() - started < PUSH_BOUND_SECONDS, "the cap did not reach the second gateway"
            await asyncio.sleep(0.01)
        while (await second.admit("bram", LACHESIS, world="hamlet-9")).budget.max_model_calls != 3:
            assert time.monotonic() - started < PUSH_BOUND_SECONDS, (
                "the budget did not reach the second gateway"
            )
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - started
        print(f"a cap and a budget set on gateway A applied on gateway B after {elapsed * 1000:.0f} ms")
        # Its lease of the world went back: the next admission leases under the new cap, and defers.
        for _ in range(100):
            if not (await second.admit("cyd", world="hamlet-7")).admitted:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the second gateway went on admitting past the new cap")
        assert time.monotonic() - started < PUSH_BOUND_SECONDS + 1
    finally:
        await first.stop()
        await second.stop()
