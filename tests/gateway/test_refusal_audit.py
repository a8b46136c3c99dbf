"""What the gateway keeps on disk stays bounded and private: a flood of refused operator calls writes a
few operator-audit rows per caller a window and one row counting the rest by RPC; the embedded store's
files are owner-only."""

from __future__ import annotations

import asyncio
import secrets
import stat
from collections import Counter
from pathlib import Path

import grpc
import pytest

from egbe.v1 import gateway_pb2
from gateway import operator_servicer
from gateway.server import build_bundle
from gateway.store.sqlite import SqliteGatewayStore
from services.auth import Role, TokenStore
from services.errors import Unauthenticated
from services.server import start_service
from tests.gateway.harness import GatewayHarness, gateway_settings, start_gateway

REFUSED = gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED


async def _refused_rows(harness: GatewayHarness) -> list[gateway_pb2.OperatorAttempt]:
    page = await harness.operator.ListOperatorAttempts(
        gateway_pb2.ListOperatorAttemptsRequest(decision=REFUSED, page_size=1_000),
        metadata=harness.metadata(Role.OPERATOR),
    )
    return list(page.attempts)


async def test_refused_attempts_are_written_a_few_a_window_and_the_rest_counted(
    tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_servicer, "REFUSAL_WINDOW_SECONDS", 1.0)
    harness = await start_gateway(gateway_settings(tmp_path, database_url))
    try:
        for n in range(25):
            call = (
                harness.operator.GetSpend(gateway_pb2.GetSpendRequest())
                if n % 5
                else harness.operator.ListControls(gateway_pb2.ListControlsRequest())
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        for _ in range(300):  # the window ends and its count is written
            rows = await _refused_rows(harness)
            if len(rows) > operator_servicer.REFUSED_ROWS_PER_WINDOW:
                break
            await asyncio.sleep(0.02)
        assert [row.method for row in rows] == ["ListControls", *["GetSpend"] * 4] * 2 + ["AGGREGATE:REFUSED"]
        assert {(row.role, row.operator_id, row.allowed) for row in rows} == {("unauthenticated", "", False)}
        assert rows[-1].detail == (
            "15 more refused attempts within 1 s, counted and not recorded one by one (at most 10 rows per"
            " caller): GetSpend x12, ListControls x3 (from ipv4:127.0.0.1)"
        )
        assert {row.detail.rsplit(" (from ", 1)[1] for row in rows} == {"ipv4:127.0.0.1)"}
        await asyncio.sleep(0.2)
        assert len(await _refused_rows(harness)) == 11  # nothing more is written
    finally:
        await harness.stop()


async def test_the_embedded_store_is_created_owner_only(tmp_path: Path) -> None:
    store = SqliteGatewayStore(tmp_path / "gateway.db", timeout_seconds=5)
    await store.open()
    try:
        modes = _modes(tmp_path)
    finally:
        await store.close()
    assert modes == {"gateway.db": 0o600, "gateway.db-wal": 0o600, "gateway.db-shm": 0o600}


def _modes(folder: Path) -> dict[str, int]:
    return {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()}


async def test_refusals_from_many_hosts_keep_a_window_each_up_to_the_bound(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    tokens = {role: secrets.token_urlsafe(24) for role in Role}
    store = TokenStore({role: [token] for role, token in tokens.items()})
    bundle = await build_bundle(settings, store)
    running = await start_service(bundle, settings.endpoints["gateway"], store, settings)
    harness = GatewayHarness(running, grpc.aio.insecure_channel(running.target), tokens)
    assert bundle.on_refused is not None
    try:
        hosts = operator_servicer.MAX_CALLERS + 8
        for n in range(hosts):
            for _ in range(2):
                bundle.on_refused(
                    "/egbe.v1.OperatorService/KillOri",
                    Unauthenticated("unknown bearer token"),
                    None,
                    f"ipv4:10.0.0.{n}:5{n:04d}",
                )
        for _ in range(300):
            rows = await _refused_rows(harness)
            if len(rows) >= 2 * operator_servicer.MAX_CALLERS + operator_servicer.REFUSED_ROWS_PER_WINDOW:
                break
            await asyncio.sleep(0.02)
        origins = Counter(row.detail.rsplit(" (from ", 1)[1].rstrip(")") for row in rows)
        own = {f"ipv4:10.0.0.{n}": 2 for n in range(operator_servicer.MAX_CALLERS)}
        # The 16 refusals of the 8 hosts past the bound share one window: 10 rows, the rest counted.
        assert origins == {**own, operator_servicer.OTHER_HOSTS: operator_servicer.REFUSED_ROWS_PER_WINDOW}
    finally:
        await harness.stop()
