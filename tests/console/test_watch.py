"""The console's shared watch against a real gateway: a world's calls arrive paced to the poll, at most
the newest ROWS_PER_MESSAGE a message, and a page is told exactly how many it was not sent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.clients import CONSOLE_READER_NAME, Caller, ConsoleClients
from console.config import ConsoleConfig
from console.watch import ROWS_PER_MESSAGE, Watch
from services.auth import Role
from tests.gateway.harness import gateway_settings, start_gateway

BURST = 3 * ROWS_PER_MESSAGE


async def test_a_busy_worlds_page_gets_the_newest_calls_and_the_count_of_the_rest(tmp_path: Path) -> None:
    harness = await start_gateway(gateway_settings(tmp_path, None))
    clients = ConsoleClients(
        operator=harness.operator,
        biography=None,  # type: ignore[arg-type]  # (no page here reads a biography)
        channels=[],
        reader=Caller(CONSOLE_READER_NAME, harness.tokens[Role.OPERATOR], windowed=True),
    )
    watch = Watch(clients, ConsoleConfig(poll_interval_seconds=1.0))
    try:
        await harness.run("ada", world="w1")
        updates = watch.updates("w1", 0)
        async with asyncio.timeout(10):
            while not (await anext(updates)).get("rows"):  # (the world's newest call, once streamed)
                pass
        await asyncio.gather(*(harness.run(f"ori-{n}", world="w1") for n in range(BURST)))
        burst = await harness.audit_records(world_id="w1")
        sent: list[str] = []
        unsent: list[int] = []
        async with asyncio.timeout(20):
            while len(sent) + sum(unsent) < BURST:
                update = await anext(updates)
                assert len(update["rows"]) <= ROWS_PER_MESSAGE
                sent += [row["run_id"] for row in update["rows"]]
                unsent.append(update["unsent"])
        assert len(sent) + sum(unsent) == BURST  # every call of the burst, sent or counted, once
        assert sum(unsent) > 0  # (the burst outran the pace)
        newest = [r.run_id for r in burst[1:]]
        assert sent == [run for run in newest if run in sent]  # in the order they were written
        assert sent[-1] == newest[-1]
    finally:
        await watch.close()
        await harness.stop()
