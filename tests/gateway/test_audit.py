"""The audit validator: a record missing identity, replay context or a safety decision is flagged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gateway.audit import audit_problems
from gateway.store.sqlite import SqliteGatewayStore
from tests.gateway.harness import gateway_settings, start_gateway


async def test_every_record_the_gateway_writes_is_replayable_and_gaps_are_flagged(tmp_path: Path) -> None:
    harness = await start_gateway(gateway_settings(tmp_path))
    try:
        for ori in ("ada", "bram"):
            run = await harness.admit(ori)
            await harness.generate(run.run_id)
            await harness.end(run.run_id)
    finally:
        await harness.stop()
    store = SqliteGatewayStore(tmp_path / "gateway.sqlite3", timeout_seconds=5)
    await store.open()
    try:
        entries = await store.list_audit(ori_id="", tier=0, run_id="", after_seq=0, limit=10)
    finally:
        await store.close()
    assert len(entries) == 2
    assert audit_problems(entries) == []

    broken = [
        dataclasses.replace(entries[0], ori_id=""),
        dataclasses.replace(entries[1], input_context={}, policy_decision=""),
    ]
    assert {(p.call_id, p.missing) for p in audit_problems(broken)} == {
        (entries[0].call_id, "ori_id"),
        (entries[1].call_id, "input_context"),
        (entries[1].call_id, "policy_decision"),
    }
