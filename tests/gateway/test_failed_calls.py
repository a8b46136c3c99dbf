"""A model call that gets no answer is audited too: its error class, zero tokens, the ledger still exact."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from egbe.v1 import common_pb2, gateway_pb2
from gateway.audit import audit_problems
from gateway.store.schema import ADDED_COLUMNS
from gateway.store.sqlite import SqliteGatewayStore
from services.auth import Role
from services.local_cluster import free_ports
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic, Scripted, error_body
from tests.gateway.harness import (
    CLOTHO,
    GatewayHarness,
    anthropic_gateway,
    gateway_settings,
    start_gateway,
)
from tests.prometheus_samples import exposed_samples, scrape


async def _ledger_equals_audit(harness: GatewayHarness, world: str = "world-1") -> None:
    records = await harness.audit_records()
    spend = await harness.spend(world)
    audited = sum(
        r.usage.input_tokens + r.usage.output_tokens + r.usage.cache_read_tokens + r.usage.cache_write_tokens
        for r in records
    )
    assert spend.consumed_tokens == audited


async def _records_when_written(harness: GatewayHarness, count: int) -> list[gateway_pb2.AuditRecord]:
    """A cancelled call's record is written after the caller has gone: wait for it (bounded)."""
    for _ in range(500):
        records = await harness.audit_records()
        if len(records) >= count:
            return records
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} audit records were written")


@pytest.mark.parametrize(
    "case",
    [
        (
            [Scripted(401, error_body("authentication_error", "bad key"))],
            "authentication",
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        (
            [Scripted(529, error_body("overloaded_error", "Overloaded")) for _ in range(2)],
            "overloaded",
            grpc.StatusCode.UNAVAILABLE,
        ),
    ],
)
async def test_a_failed_provider_call_writes_an_audit_record_with_its_error_class(
    tmp_path: Path,
    database_url: str | None,
    fake: FakeAnthropic,
    case: tuple[list[Scripted], str, grpc.StatusCode],
) -> None:
    script, error_class, status = case
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        run = await harness.admit("ada")
        fake.script.extend(script)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await harness.generate(run.run_id)
        assert failed.value.code() == status
        answered = await harness.generate(run.run_id)  # the run goes on: the second call is answered
        await harness.end(run.run_id)

        first, second = await harness.audit_records(run_id=run.run_id)
        assert (first.call_id, first.error_class, first.output) == (f"{run.run_id}:1", error_class, "")
        assert first.usage == common_pb2.TokenUsage()
        assert first.cost.micro_usd == 0
        assert not first.offline
        assert first.input_context["system_policy"]  # replayable like any other record
        assert (second.error_class, second.output) == ("", answered.text)
        assert second.usage.output_tokens > 0
        spend = await harness.spend("world-1")
        assert spend.reserved_tokens == 0
        await _ledger_equals_audit(harness)
    finally:
        await harness.stop()


async def test_a_killed_and_a_cancelled_call_are_audited(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    fake.default_delay_seconds = SLOW_MODEL_SECONDS
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        cancelled_run = await harness.admit("bram")
        call = harness.gateway.Generate(
            gateway_pb2.GenerateRequest(
                run_id=cancelled_run.run_id,
                mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
                prompt=gateway_pb2.PromptEnvelope(system_policy="You are Bram.", task_instruction="Speak."),
            ),
            metadata=harness.metadata(Role.SERVICE),
        )
        await fake.until_requests(1)
        call.cancel()
        [cancelled] = await _records_when_written(harness, 1)
        assert (cancelled.run_id, cancelled.error_class) == (cancelled_run.run_id, "cancelled")

        killed_run = await harness.admit("ada")
        pending = asyncio.ensure_future(harness.generate(killed_run.run_id))
        await fake.until_requests(2)
        await harness.operator.KillOri(
            gateway_pb2.KillOriRequest(ori_id="ada", reason="stop now"), metadata=harness.metadata_operator()
        )
        with pytest.raises(grpc.aio.AioRpcError) as stopped:
            await asyncio.wait_for(pending, 5.0)
        assert stopped.value.code() == grpc.StatusCode.ABORTED
        [killed] = await harness.audit_records(run_id=killed_run.run_id)
        assert (killed.error_class, killed.output, killed.usage) == ("killed", "", common_pb2.TokenUsage())

        await harness.end(cancelled_run.run_id, gateway_pb2.RUN_OUTCOME_FAILED)
        spend = await harness.spend("world-1")
        assert spend.reserved_tokens == 0
        await _ledger_equals_audit(harness)
    finally:
        await harness.stop()


async def test_failed_records_pass_the_validator_and_carry_the_kernel_call_id(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    harness = await anthropic_gateway(tmp_path, None)
    try:
        run = await harness.gateway.AdmitRun(
            gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(tenant_id="t", world_id="world-1", ori_id="ada"),
                tier=CLOTHO,
                cause=1,  # type: ignore[arg-type]
                kernel_call_id="world-1:42:7:1",
            ),
            metadata=harness.metadata(Role.SERVICE),
        )
        fake.script.append(Scripted(400, error_body("invalid_request_error", "bad field")))
        with pytest.raises(grpc.aio.AioRpcError):
            await harness.generate(run.run_id)
        await harness.generate(run.run_id)
        records = await harness.audit_records(kernel_call_id="world-1:42:7:1")
        assert [(r.kernel_call_id, r.error_class) for r in records] == [
            ("world-1:42:7:1", "invalid_request"),
            ("world-1:42:7:1", ""),
        ]
        assert await harness.audit_records(kernel_call_id="world-1:42:7:2") == []
    finally:
        await harness.stop()
    store = SqliteGatewayStore(tmp_path / "gateway.sqlite3", timeout_seconds=5)
    await store.open()
    entries = await store.list_audit(ori_id="", tier=0, run_id="", after_seq=0, limit=10)
    await store.close()
    assert audit_problems(entries) == []
    assert [e.error_class for e in entries] == ["invalid_request", ""]


async def test_a_store_from_before_the_kernel_call_id_gains_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = SqliteGatewayStore(path, timeout_seconds=5)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as old:  # back to the tables as the first release created them
        old.execute("DROP INDEX gateway_audit_kernel_call")
        for table, column, _ in ADDED_COLUMNS:
            old.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    harness = await start_gateway(gateway_settings(tmp_path))
    try:
        run = await harness.admit("ada")
        await harness.generate(run.run_id)
        [record] = await harness.audit_records(kernel_call_id="")
        assert (record.kernel_call_id, record.error_class) == ("", "")
        assert record.model_latency_us > 0  # the offline adapter's time, in the added column
    finally:
        await harness.stop()


async def test_errors_retried_past_are_counted_on_the_run_and_in_the_retry_stats(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    [metrics_port] = free_ports(1)
    harness = await anthropic_gateway(tmp_path, database_url, metrics_port=metrics_port)
    try:
        run = await harness.admit("ada")
        fake.script.append(Scripted(529, error_body("overloaded_error", "Overloaded")))
        answered = await harness.generate(run.run_id)  # the second attempt is answered
        assert answered.provider_attempts == 2
        await harness.end(run.run_id)
        reply = await harness.operator.GetRetryStats(
            gateway_pb2.GetRetryStatsRequest(), metadata=harness.metadata(Role.OPERATOR)
        )
        stats = json_format.MessageToDict(reply.stats)
        assert stats["providerErrors"] == {"overloaded": 1.0, "total": 1.0, "runsPresent": 1.0}
        # And in the metrics, scraped from the gateway's Prometheus endpoint over HTTP.
        scraped = await asyncio.to_thread(scrape, metrics_port)
    finally:
        await harness.stop()
    with socket.socket() as rebind:  # the metrics endpoint closed with the gateway: its port can be bound
        rebind.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as a restarted one binds it)
        rebind.bind(("127.0.0.1", metrics_port))
    samples = exposed_samples(scraped)
    assert samples[("egbe_gateway_provider_errors_total", (("error_class", "overloaded"),))] == 1
    assert (
        samples[
            (
                "egbe_gateway_model_calls_total",
                (("model", "anthropic:claude-opus-class-latest"), ("tier", "clotho")),
            )
        ]
        == 1
    )
