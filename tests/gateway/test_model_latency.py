"""Each model call's latency: how long the adapter took, timed by the gateway, on the answer, on the call's
audit record (answered, failed or killed) and in the latency histogram."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from egbe.v1 import gateway_pb2
from gateway.adapters.base import ModelRequest
from gateway.runs import Who
from gateway.server import build_gateway
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic, Scripted, error_body
from tests.gateway.harness import anthropic_gateway, gateway_settings
from tests.prometheus_samples import exposed_samples

MODEL_SECONDS = 0.3
MODEL_US = int(MODEL_SECONDS * 1_000_000)


async def test_an_answered_call_carries_the_adapters_time_on_its_answer_and_record(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    fake.script.append(Scripted(delay_seconds=MODEL_SECONDS))
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        run = await harness.admit("ada")
        answered = await harness.generate(run.run_id)
        fast = await harness.run("bram")  # the fake answers at once
        [record] = await harness.audit_records(run_id=run.run_id)
        [fast_record] = await harness.audit_records(run_id=fast.admission.run_id)
    finally:
        await harness.stop()
    # At least the model's own delay (how much more it took is the benchmark's: bench/gateway_overhead.py).
    assert answered.model_latency_us >= MODEL_US
    assert record.model_latency_us == answered.model_latency_us
    assert fast.generation.model_latency_us > 0
    assert fast_record.model_latency_us == fast.generation.model_latency_us


async def test_a_failed_and_a_killed_call_record_how_long_they_took_until_they_ended(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    fake.script.append(
        Scripted(401, error_body("authentication_error", "bad key"), delay_seconds=MODEL_SECONDS)
    )
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        refused = await harness.admit("ada")
        with pytest.raises(grpc.aio.AioRpcError):
            await harness.generate(refused.run_id)
        [failed] = await harness.audit_records(run_id=refused.run_id)

        fake.default_delay_seconds = SLOW_MODEL_SECONDS
        killed_run = await harness.admit("bram")
        pending = asyncio.ensure_future(harness.generate(killed_run.run_id))
        await fake.until_requests(2)  # the adapter has called the model: it is timing
        await asyncio.sleep(MODEL_SECONDS)
        await harness.operator.KillOri(
            gateway_pb2.KillOriRequest(ori_id="bram", reason="stop"), metadata=harness.metadata_operator()
        )
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(pending, 5.0)
        [killed] = await harness.audit_records(run_id=killed_run.run_id)
    finally:
        await harness.stop()
    assert failed.error_class == "authentication"
    assert failed.model_latency_us >= MODEL_US
    assert killed.error_class == "killed"
    # timed until the kill ended it, not until the model would have answered
    assert MODEL_US <= killed.model_latency_us < SLOW_MODEL_SECONDS * 1_000_000


async def test_answered_calls_fill_the_latency_histogram(tmp_path: Path) -> None:
    gateway = await build_gateway(gateway_settings(tmp_path))  # the offline adapter
    try:
        for ori in ("ada", "bram", "cole"):
            admitted = await gateway.admit(Who("t", "w", ori), 1, 1)
            await gateway.generate(admitted.run.run_id, ModelRequest("p", "Objective: x", mode="dialogue"))
        samples = exposed_samples(gateway.metrics.exposition())
    finally:
        await gateway.stop()
    labels = (("model", "offline:deterministic-v1"), ("tier", "clotho"))
    assert samples[("egbe_gateway_model_latency_seconds_count", labels)] == 3
    assert (
        samples[("egbe_gateway_model_latency_seconds_bucket", tuple(sorted((*labels, ("le", "+Inf")))))] == 3
    )
    assert samples[("egbe_gateway_model_latency_seconds_sum", labels)] > 0
