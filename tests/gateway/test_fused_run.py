"""`Run`: admit, one model call and end in one RPC, with every guarantee of the three separate RPCs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from egbe.v1 import common_pb2, gateway_pb2
from gateway.config import RunBudget
from services.auth import Role
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic
from tests.gateway.harness import (
    CLOTHO,
    GatewayHarness,
    anthropic_gateway,
    gateway_settings,
    generate_request,
    start_gateway,
)

CLOTHO_RESERVATION = 4_000


async def _ledger_equals_audit(harness: GatewayHarness) -> gateway_pb2.GetSpendResponse:
    spend = await harness.spend("world-1")
    audited = sum(r.usage.input_tokens + r.usage.output_tokens for r in await harness.audit_records())
    assert spend.consumed_tokens == audited
    return spend


async def test_a_run_admits_calls_once_audits_and_releases_in_one_rpc(gateway: GatewayHarness) -> None:
    reply = await gateway.run("ada")
    assert reply.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
    assert reply.admission.admitted
    assert reply.admission.reserved_tokens == CLOTHO_RESERVATION
    assert reply.generation.text
    assert reply.generation.offline
    used = reply.generation.usage.input_tokens + reply.generation.usage.output_tokens
    assert (reply.ending.used_tokens, reply.ending.ended_now) == (used, True)
    assert reply.ending.released_tokens == CLOTHO_RESERVATION - used

    [record] = await gateway.audit_records(run_id=reply.admission.run_id)
    assert record.call_id == f"{reply.admission.run_id}:1" == reply.generation.call_id
    assert record.output == reply.generation.text
    spend = await _ledger_equals_audit(gateway)
    assert (spend.reserved_tokens, spend.admissions) == (0, 1)

    # The run is over: its id admits no further call.
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await gateway.generate(reply.admission.run_id)
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_killed_ori_is_refused_before_any_call(gateway: GatewayHarness) -> None:
    await gateway.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada", reason="runaway"), metadata=gateway.metadata_operator()
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.run("ada")
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert "runaway" in (refused.value.details() or "")
    assert await gateway.audit_records() == []
    assert (await gateway.run("bram")).outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
    assert (await _ledger_equals_audit(gateway)).reserved_tokens == 0


async def test_the_world_cap_defers_a_run_without_a_call(tmp_path: Path, database_url: str | None) -> None:
    settings = gateway_settings(tmp_path, database_url)
    budget = settings.gateway.budget.model_copy(update={"world_cap_tokens_per_hour": CLOTHO_RESERVATION - 1})
    harness = await start_gateway(
        settings.model_copy(update={"gateway": settings.gateway.model_copy(update={"budget": budget})})
    )
    try:
        reply = await harness.run("ada")
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP
        assert not reply.admission.admitted
        assert not reply.HasField("generation")
        assert await harness.audit_records() == []
        spend = await harness.spend("world-1")
        assert (spend.reserved_tokens, spend.blocked_by_world_cap) == (0, 1)
    finally:
        await harness.stop()


async def test_a_prompt_over_the_run_budget_reserves_nothing(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    budgets = settings.gateway.run_budgets.model_copy(
        update={"clotho": RunBudget(max_model_calls=2, max_tool_calls=2, max_tokens=10)}
    )
    harness = await start_gateway(
        settings.model_copy(update={"gateway": settings.gateway.model_copy(update={"run_budgets": budgets})})
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as exhausted:
            await harness.run("ada", task_instruction="a prompt far longer than ten tokens " * 4)
        assert exhausted.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_tokens" in (exhausted.value.details() or "")
        spend = await harness.spend("world-1")
        assert (spend.admissions, spend.reserved_tokens) == (0, 0)
    finally:
        await harness.stop()


async def test_a_repeated_request_id_answers_the_first_run(gateway: GatewayHarness) -> None:
    first = await gateway.run("ada", request_id="req-1")
    again = await gateway.run("ada", request_id="req-1")
    assert again == first
    assert len(await gateway.audit_records()) == 1
    assert (await gateway.spend("world-1")).admissions == 1


@pytest.mark.parametrize(
    ("admit", "generate", "field"),
    [
        (
            gateway_pb2.AdmitRunRequest(ori=common_pb2.OriRef(world_id="w", ori_id="ada"), tier=9),  # type: ignore[arg-type]
            generate_request(""),
            "admit.tier",
        ),
        (
            gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(world_id="w", ori_id="ada"), tier=CLOTHO, cause=1
            ),  # type: ignore[arg-type]
            generate_request("run-1"),
            "generate.run_id",
        ),
        (
            gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(world_id="w", ori_id="ada"), tier=CLOTHO, cause=1
            ),  # type: ignore[arg-type]
            gateway_pb2.GenerateRequest(prompt=gateway_pb2.PromptEnvelope(system_policy="x")),
            "generate.mode",
        ),
    ],
)
async def test_bad_input_names_the_nested_field(
    gateway: GatewayHarness,
    admit: gateway_pb2.AdmitRunRequest,
    generate: gateway_pb2.GenerateRequest,
    field: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.gateway.Run(
            gateway_pb2.RunRequest(admit=admit, generate=generate), metadata=gateway.metadata(Role.SERVICE)
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or "")
    assert (await gateway.spend()).admissions == 0


async def test_a_kill_during_the_call_aborts_the_run_and_releases_it(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    fake.default_delay_seconds = SLOW_MODEL_SECONDS
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        pending = asyncio.ensure_future(harness.run("ada"))
        await fake.until_requests(1)
        await harness.operator.KillOri(
            gateway_pb2.KillOriRequest(ori_id="ada", reason="stop now"), metadata=harness.metadata_operator()
        )
        with pytest.raises(grpc.aio.AioRpcError) as stopped:
            await asyncio.wait_for(pending, 5.0)
        assert stopped.value.code() == grpc.StatusCode.ABORTED
        [killed] = await harness.audit_records()
        assert (killed.error_class, killed.output) == ("killed", "")
        spend = await _ledger_equals_audit(harness)
        assert (spend.reserved_tokens, spend.killed, spend.killed_in_flight) == (0, 1, 1)
    finally:
        await harness.stop()
