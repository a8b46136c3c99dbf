"""A world's calls, its spend by tier and what its active runs hold, as ListWorlds and GetSpend report
them, are kept with the ledger as runs and audit records are written (never by scanning the audit log or
the runs), so they equal the audit log and the runs after every kind of call; a store from before the
counts fills them from its log when opened."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from egbe.v1 import gateway_pb2
from tests.gateway.harness import (
    ATROPOS,
    CLOTHO,
    LACHESIS,
    GatewayHarness,
    build_store,
    gateway_settings,
    start_gateway,
)
from tests.gateway.test_leases import _execute

Counts = tuple[dict[str, int], dict[tuple[str, int], tuple[int, int, int]]]


async def counted(harness: GatewayHarness) -> Counts:
    """(calls by world from ListWorlds, (world, tier) -> (calls, tokens, micro-USD) from GetSpend)."""
    listed = await harness.operator.ListWorlds(
        gateway_pb2.ListWorldsRequest(page_size=100), metadata=harness.metadata_operator()
    )
    calls = {w.world_id: w.calls for w in listed.worlds}
    by_tier = {
        (world, t.tier): (t.calls, t.tokens, t.micro_usd)
        for world in calls
        for t in (await harness.spend(world)).by_tier
    }
    return calls, by_tier


async def reserved(harness: GatewayHarness) -> tuple[int, int]:
    """What world-1's active runs hold, as GetSpend and as ListWorlds report it."""
    listed = await harness.operator.ListWorlds(
        gateway_pb2.ListWorldsRequest(page_size=100), metadata=harness.metadata_operator()
    )
    [world] = [w for w in listed.worlds if w.world_id == "world-1"]
    return (await harness.spend("world-1")).reserved_tokens, world.reserved_tokens


def audited(records: list[gateway_pb2.AuditRecord], worlds: set[str]) -> Counts:
    """The same figures, counted from the audit records themselves."""
    calls = Counter(r.ori.world_id for r in records)
    sums: dict[tuple[str, int], tuple[int, int, int]] = {}
    for r in records:
        n, tokens, usd = sums.get((r.ori.world_id, r.tier), (0, 0, 0))
        usage = r.usage
        total = usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        sums[(r.ori.world_id, r.tier)] = (n + 1, tokens + total, usd + r.cost.micro_usd)
    return {w: calls[w] for w in worlds}, sums


async def test_calls_and_spend_by_tier_equal_the_audit_log_after_each_kind_of_call(
    tmp_path: Path, database_url: str | None
) -> None:
    harness = await start_gateway(gateway_settings(tmp_path, database_url))
    try:
        await harness.run("ada", tier=CLOTHO)
        await harness.run("bram", tier=LACHESIS, world="world-2")
        first = await counted(harness)
        assert first == audited(await harness.audit_records(), {"world-1", "world-2"})
        assert first[0] == {"world-1": 1, "world-2": 1}

        admitted = await harness.admit("cyd", ATROPOS)  # a run of two calls, ended apart
        assert await reserved(harness) == (admitted.reserved_tokens,) * 2
        called = await harness.generate(admitted.run_id)
        used = called.usage.input_tokens + called.usage.output_tokens
        assert await reserved(harness) == (admitted.reserved_tokens - used,) * 2
        await harness.generate(admitted.run_id)
        await harness.end(admitted.run_id)
        assert await reserved(harness) == (0, 0)
        await harness.run("ada", tier=CLOTHO)
        second = await counted(harness)
        assert second == audited(await harness.audit_records(), {"world-1", "world-2"})
        assert second[0] == {"world-1": 4, "world-2": 1}
        assert {tier: n for (world, tier), (n, _, _) in second[1].items() if world == "world-1"} == {
            CLOTHO: 2,
            ATROPOS: 2,
        }
    finally:
        await harness.stop()


async def test_a_store_from_before_the_counts_fills_them_from_its_audit_log(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    harness = await start_gateway(settings)
    try:
        await harness.run("ada", tier=CLOTHO)
        await harness.run("bram", tier=LACHESIS)
        await harness.run("cyd", tier=CLOTHO, world="world-2")
        before = await counted(harness)
    finally:
        await harness.stop()
    now_ms = int(time.time() * 1000)
    window_ms = now_ms - now_ms % (settings.gateway.ledger_window_seconds * 1000)
    # Back to the schema before the counts, with a lease settlement's record (no run row: counted in the
    # world's window it falls in) beside the calls.
    settlement = (
        "INSERT INTO gateway_audit (call_id, run_id, tenant_id, world_id, ori_id, tier, cause, model_ref,"
        " model_class, input_context, output, input_tokens, output_tokens, cache_read_tokens,"
        " cache_write_tokens, micro_usd, cost_estimated, policy_decision, retention_policy_id,"
        " config_fingerprint, offline, recorded_at_ms) VALUES ('lease-settlement:1', 'lease:g', '',"
        " 'world-1', '', 0, 'lease-settlement', '', '', '{}', '', 500, 0, 0, 0, 0, 1, 'p', 'r', 'f', 0, ?)"
    )
    await _execute(
        database_url,
        tmp_path,
        [
            ("DROP TABLE gateway_tier_spend", ()),
            ("ALTER TABLE gateway_ledger DROP COLUMN calls", ()),
            (settlement, (window_ms + 1,)),
        ],
    )
    store = build_store(settings)
    await store.open()  # (the upgrade)
    await store.close()
    harness = await start_gateway(settings)
    try:
        calls, by_tier = await counted(harness)
        assert calls == {"world-1": before[0]["world-1"] + 1, "world-2": 1}
        assert by_tier == before[1] | {("world-1", 0): (1, 500, 0)}
        await harness.run("ada", tier=CLOTHO)  # and counting goes on from there
        assert (await counted(harness))[0] == {"world-1": before[0]["world-1"] + 2, "world-2": 1}
    finally:
        await harness.stop()
