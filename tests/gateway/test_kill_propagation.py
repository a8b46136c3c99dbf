"""Pushed controls: a kill stops in-flight model calls at once, in this process and in another gateway."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.harness import (
    gateway_settings,
    process_target,
    record_route_scores,
    serve_gateway_process,
    start_gateway,
    write_tokens_file,
)

SLOW_MODEL_SECONDS = 30.0  # far longer than any push may take: only a push can end the call sooner
PUSH_BOUND_SECONDS = 5.0


@pytest.fixture
def slow_model() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic().start()
    fake.default_delay_seconds = SLOW_MODEL_SECONDS
    yield fake
    fake.stop()


async def _wait_for_model_call(fake: FakeAnthropic, count: int = 1) -> None:
    for _ in range(500):
        if len(fake.message_requests()) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the model call never reached the fake API")


async def test_a_kill_cancels_an_in_flight_model_call(
    tmp_path: Path, slow_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", slow_model.base_url)
    harness = await start_gateway(gateway_settings(tmp_path))
    try:
        run = await harness.admit("ada")
        call = asyncio.ensure_future(harness.generate(run.run_id))
        await _wait_for_model_call(slow_model)
        await harness.operator.KillOri(
            gateway_pb2.KillOriRequest(ori_id="ada", reason="stop now"), metadata=harness.metadata_operator()
        )
        with pytest.raises(grpc.aio.AioRpcError) as stopped:
            await asyncio.wait_for(call, PUSH_BOUND_SECONDS)
        assert stopped.value.code() == grpc.StatusCode.ABORTED
        assert "kill ori 'ada'" in (stopped.value.details() or "")
        [record] = await harness.audit_records()  # the stopped call is audited: no output, no tokens
        assert (record.error_class, record.output, record.usage.output_tokens) == ("killed", "", 0)
    finally:
        await harness.stop()


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_kill_on_one_gateway_stops_work_on_another_sharing_postgres(
    tmp_path: Path, postgres_dsn: str, slow_model: FakeAnthropic
) -> None:
    tokens_file, tokens = write_tokens_file(tmp_path)
    offline_env = {"ANTHROPIC_API_KEY": ""}
    model_env = {"ANTHROPIC_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_BASE_URL": slow_model.base_url}
    await record_route_scores(gateway_settings(tmp_path / "b", postgres_dsn))  # gateway b's model routes
    processes = [
        serve_gateway_process(tmp_path / "a", tokens_file, postgres_dsn, offline_env),
        serve_gateway_process(tmp_path / "b", tokens_file, postgres_dsn, model_env),
    ]
    try:
        target_a = await process_target(processes[0], tmp_path / "a")
        target_b = await process_target(processes[1], tmp_path / "b")
        service, operator = bearer_metadata(tokens["service"]), bearer_metadata(tokens["operator"])
        async with (
            grpc.aio.insecure_channel(target_a) as channel_a,
            grpc.aio.insecure_channel(target_b) as channel_b,
        ):
            gateway_b = gateway_pb2_grpc.CognitionGatewayServiceStub(channel_b)
            ori = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ada")
            run = await gateway_b.AdmitRun(
                gateway_pb2.AdmitRunRequest(ori=ori, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=1),
                metadata=service,
            )
            call = asyncio.ensure_future(
                gateway_b.Generate(
                    gateway_pb2.GenerateRequest(run_id=run.run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE),
                    metadata=service,
                )
            )
            await _wait_for_model_call(slow_model)
            started = time.monotonic()
            await gateway_pb2_grpc.OperatorServiceStub(channel_a).KillOri(
                gateway_pb2.KillOriRequest(ori_id="ada", reason="runaway"), metadata=operator
            )
            with pytest.raises(grpc.aio.AioRpcError) as stopped:
                await asyncio.wait_for(call, PUSH_BOUND_SECONDS)
            elapsed = time.monotonic() - started
            assert stopped.value.code() == grpc.StatusCode.ABORTED
            print(f"kill on gateway A stopped an in-flight call on gateway B after {elapsed * 1000:.0f} ms")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await gateway_b.AdmitRun(
                    gateway_pb2.AdmitRunRequest(ori=ori, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=1),
                    metadata=service,
                )
            assert refused.value.code() == grpc.StatusCode.ABORTED

            # The same for a fused run (`Run`) in flight on B.
            bram = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="bram")
            fused = asyncio.ensure_future(
                gateway_b.Run(
                    gateway_pb2.RunRequest(
                        admit=gateway_pb2.AdmitRunRequest(
                            ori=bram, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=1
                        ),
                        generate=gateway_pb2.GenerateRequest(mode=gateway_pb2.COGNITION_MODE_DIALOGUE),
                    ),
                    metadata=service,
                )
            )
            await _wait_for_model_call(slow_model, 2)
            await gateway_pb2_grpc.OperatorServiceStub(channel_a).KillOri(
                gateway_pb2.KillOriRequest(ori_id="bram", reason="runaway"), metadata=operator
            )
            with pytest.raises(grpc.aio.AioRpcError) as stopped_run:
                await asyncio.wait_for(fused, PUSH_BOUND_SECONDS)
            assert stopped_run.value.code() == grpc.StatusCode.ABORTED
            assert "kill ori 'bram'" in (stopped_run.value.details() or "")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
