"""Submit's other endings: a caller that cancels, a kill while Think runs, a run past its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from egbe.v1 import action_pb2, common_pb2, gateway_pb2
from services.auth import Role
from services.settings import Endpoint
from tests.gateway.harness import CLOTHO, GatewayHarness, gateway_settings, start_gateway


@pytest.fixture
async def silent_cognition() -> AsyncIterator[int]:
    """A TCP endpoint that accepts and never answers: Think hangs there until cancelled or timed out."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def _gateway(tmp_path: Path, port: int, **config: object) -> GatewayHarness:
    settings = gateway_settings(tmp_path, **config)
    endpoints = {**settings.endpoints, "cognition": Endpoint(port=port)}
    return await start_gateway(settings.model_copy(update={"endpoints": endpoints}))


def _submit(ori: str) -> gateway_pb2.SubmitRequest:
    return gateway_pb2.SubmitRequest(
        candidate=action_pb2.CognitionCallCandidate(
            ori=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id=ori), tier=CLOTHO, cause=1
        ),
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
    )


async def _until_reserved(harness: GatewayHarness, tokens: int) -> None:
    for _ in range(500):
        if (await harness.spend("w")).reserved_tokens == tokens:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"reserved tokens never reached {tokens}")


async def test_a_cancelled_submit_releases_its_reservation(tmp_path: Path, silent_cognition: int) -> None:
    harness = await _gateway(tmp_path, silent_cognition)
    try:
        call = harness.gateway.Submit(_submit("ada"), metadata=harness.metadata(Role.SERVICE))
        await _until_reserved(harness, 4_000)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await _until_reserved(harness, 0)
    finally:
        await harness.stop()


async def test_a_kill_ends_a_submit_whose_think_is_running(tmp_path: Path, silent_cognition: int) -> None:
    harness = await _gateway(tmp_path, silent_cognition)
    try:
        call = asyncio.ensure_future(
            harness.gateway.Submit(_submit("ada"), metadata=harness.metadata(Role.SERVICE))
        )
        await _until_reserved(harness, 4_000)
        await harness.operator.KillOri(
            gateway_pb2.KillOriRequest(ori_id="ada", reason="stop"), metadata=harness.metadata(Role.OPERATOR)
        )
        reply = await asyncio.wait_for(call, 10)
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_KILLED
        assert "kill ori 'ada'" in reply.detail
        assert (await harness.spend("w")).reserved_tokens == 0
    finally:
        await harness.stop()


async def test_a_submit_past_its_deadline_fails_and_releases(tmp_path: Path, silent_cognition: int) -> None:
    harness = await _gateway(tmp_path, silent_cognition, run_timeout_seconds=0.5)
    try:
        reply = await harness.gateway.Submit(_submit("ada"), metadata=harness.metadata(Role.SERVICE))
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_FAILED
        assert (await harness.spend("w")).reserved_tokens == 0
    finally:
        await harness.stop()
