"""The PostgreSQL store's push channel: a listener that stops hearing the server says so, and reconnects.

A kill reaches every gateway by NOTIFY on the one connection each holds listening. If that connection
falls silent without closing (a partition), nothing arrives and nothing fails: without a check, the
gateway would go on admitting on controls it no longer hears about, counted healthy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from gateway.records import Control, ControlKind, ControlScope
from gateway.store.postgres import LISTEN_HEARTBEAT_SECONDS, PostgresGatewayStore
from tests.gateway.relay import relayed

pytestmark = pytest.mark.postgres

TIMEOUT_S = 1.0
# The listener notices within a heartbeat's interval and its timeout; the rest is this machine's slack.
NOTICED_WITHIN_S = LISTEN_HEARTBEAT_SECONDS + TIMEOUT_S + 8.0


async def _eventually(condition: Callable[[], bool], within_s: float) -> None:
    """Wait until `condition` holds; fail past `within_s`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > within_s:
            raise AssertionError(f"not within {within_s} s")
        await asyncio.sleep(0.02)


async def test_a_silent_listener_counts_unhealthy_then_reconnects_and_hears_again(postgres_dsn: str) -> None:
    async with relayed(postgres_dsn) as (relay, relayed_dsn):
        store = PostgresGatewayStore(relayed_dsn, timeout_seconds=TIMEOUT_S, poll_wait_us=0)
        operator = PostgresGatewayStore(postgres_dsn, timeout_seconds=TIMEOUT_S, poll_wait_us=0)
        heard: list[Control] = []
        store.on_control_change(heard.append)
        await store.open()
        await operator.open()
        try:
            assert store.healthy
            before = relay.connections
            relay.silence()  # the writer's connection and the listener's: open, and never answered
            await _eventually(lambda: not store.healthy, NOTICED_WITHIN_S)
            # Healthy again only on new connections (the old ones stay silent for ever).
            await _eventually(lambda: store.healthy, NOTICED_WITHIN_S)
            assert relay.connections > before
            control = Control("c1", ControlKind.KILL, ControlScope.ORI, "ada", "after the partition", "op", 1)
            await operator.add_control(control)
            await _eventually(lambda: control in heard, NOTICED_WITHIN_S)
        finally:
            await operator.close()
            await store.close()


async def test_a_listener_retries_a_server_that_accepts_but_never_answers(
    postgres_dsn: str,
) -> None:
    async with relayed(postgres_dsn) as (relay, relayed_dsn):
        store = PostgresGatewayStore(relayed_dsn, timeout_seconds=TIMEOUT_S, poll_wait_us=0)
        await store.open()
        try:
            relay.silence(later_too=True)
            await _eventually(lambda: not store.healthy, NOTICED_WITHIN_S)
            tried = relay.connections
            # Each attempt gives up at the connect timeout and the listener tries again: none hangs.
            await _eventually(lambda: relay.connections >= tried + 2, NOTICED_WITHIN_S)
            assert not store.healthy
            relay.heal()
            await _eventually(lambda: store.healthy, NOTICED_WITHIN_S)
        finally:
            await store.close()
