"""A tick's answer: a delta lists every agent that changed, carries a guard stamp or a merged result,
once each; the report carries the tick's figures."""

from __future__ import annotations

import numpy as np
from google.protobuf import struct_pb2

from egbe.v1 import action_pb2
from kernel_service.agent_state import COUNT_CHANGED, COUNT_GUARDS, AgentArrays
from kernel_service.cognition_calls import CallTables, estimate_calls
from kernel_service.config import KernelConfig
from kernel_service.perception_codec import DecodedBatch, Encoding
from kernel_service.row_codec import PythonRowCodec
from kernel_service.tick_result import Registry, build_actions, fill_report, guard_stamps, report_constants
from services.column_layout import ACTION_COLUMNS, SLOT_DTYPE


def test_delta_answer_is_the_union_of_changed_guarded_and_merged_agents_in_slot_order() -> None:
    a = AgentArrays()
    a.add(10)
    a.fields["out_kind"][:10] = np.arange(10, dtype=np.uint8) + 1
    # Changed: 1 and 5; guards: 5 (stale goal) and 7 (repeated action, its answer unchanged);
    # a cognition result merged for 3.
    a.outputs["changed_slot"][:2] = [1, 5]
    a.counts[COUNT_CHANGED] = 2
    a.outputs["guard_slot"][:2] = [5, 7]
    a.outputs["guard_bits"][:2] = [2, 1]
    a.counts[COUNT_GUARDS] = 2
    payload = struct_pb2.Struct()
    payload.update({"said": "hello"})
    batch = action_pb2.ActionBatch()
    marks = np.zeros(16, np.uint8)
    build_actions(
        KernelConfig(),
        a=a,
        registry=Registry("w", [f"ori-{i}" for i in range(10)], ["t"] * 10),
        decoded=DecodedBatch(Encoding.COLUMNS_DELTA, 4, np.array([2], dtype=np.uint32), {}),
        guards=guard_stamps(a),
        merged_payloads={3: payload},
        row_codec=PythonRowCodec(),
        batch=batch,
        marks=marks,
    )
    assert not marks.any()  # left zeroed for the next tick
    columns = batch.columns
    assert columns.count == 4
    assert np.frombuffer(columns.slots, SLOT_DTYPE).tolist() == [1, 3, 5, 7]
    assert np.frombuffer(columns.kind, ACTION_COLUMNS["kind"]).tolist() == [2, 4, 6, 8]
    assert np.frombuffer(columns.guard_bits, ACTION_COLUMNS["guard_bits"]).tolist() == [0, 0, 2, 1]
    assert [(p.slot, p.payload["said"]) for p in columns.payloads] == [(3, "hello")]


def test_delta_answer_without_guards_or_results_is_the_changed_list() -> None:
    a = AgentArrays()
    a.add(10)
    a.fields["out_kind"][:10] = np.arange(10, dtype=np.uint8) + 1
    a.outputs["changed_slot"][:3] = [0, 4, 9]
    a.counts[COUNT_CHANGED] = 3
    batch = action_pb2.ActionBatch()
    marks = np.zeros(16, np.uint8)
    build_actions(
        KernelConfig(),
        a=a,
        registry=Registry("w", [f"ori-{i}" for i in range(10)], ["t"] * 10),
        decoded=DecodedBatch(Encoding.COLUMNS_DELTA, 4, np.array([2], dtype=np.uint32), {}),
        guards=guard_stamps(a),
        merged_payloads={},
        row_codec=PythonRowCodec(),
        batch=batch,
        marks=marks,
    )
    assert not marks.any()  # left zeroed for the next tick
    columns = batch.columns
    assert columns.count == 3
    assert np.frombuffer(columns.slots, SLOT_DTYPE).tolist() == [0, 4, 9]
    assert np.frombuffer(columns.kind, ACTION_COLUMNS["kind"]).tolist() == [1, 5, 10]
    assert columns.guard_bits == b""  # no guard fired: the column stays empty


def test_the_report_parsed_from_wire_bytes_equals_the_one_built_field_by_field() -> None:
    """Reason counts of one and two varint bytes (and reason 0), the constants, the tick's figures."""
    a = AgentArrays()
    a.add(3)
    a.reason_counts[:] = 0
    a.reason_counts[[0, 4, 7]] = [1, 127, 9_905]
    a.tier_counts[1:] = [2, 300, 5]
    a.counts[COUNT_GUARDS] = 4
    config = KernelConfig()
    fingerprint = config.fingerprint(None)
    estimates = estimate_calls(
        CallTables.from_config(config),
        world_id="w",
        tick=9,
        causes=np.array([action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION] * 3, np.uint8),
        tiers=np.array([2, 2, 2], np.uint8),
    )
    report = action_pb2.KernelTickReport()
    fill_report(
        report,
        report_constants(config, "c", fingerprint),
        a=a,
        registry=Registry("w", ["a", "b", "c"], ["t"] * 3),
        tick=9,
        estimates=estimates,
        merged=1,
    )
    assert report == action_pb2.KernelTickReport(
        world_id="w",
        tick=9,
        latency_budget_micros=config.latency_budget_micros,
        clotho_count=2,
        lachesis_count=300,
        atropos_count=5,
        reason_counts=[
            action_pb2.TierReasonCount(reason=action_pb2.TierReason.ValueType(reason), count=count)
            for reason, count in ((0, 1), (4, 127), (7, 9_905))
        ],
        calls_issued=3,
        estimated_tokens=int(estimates.tokens.sum()),
        estimated_cost_micro_usd=int(estimates.costs.sum()),
        batched_call_groups=1,
        batching_overhead_tokens_saved=estimates.overhead_tokens_saved,
        batching_savings_bp=estimates.savings_bp,
        guard_interventions=4,
        core="c",
        config_fingerprint=fingerprint,
        cognition_results_merged=1,
    )
    assert estimates.overhead_tokens_saved > 0  # the three reflections coalesced


def test_a_full_answers_guard_column_holds_only_this_ticks_stamps() -> None:
    """The column is worked out in the kernel's reused scratch: the last tick's stamps must not show."""
    a = AgentArrays()
    a.add(6)
    marks = np.zeros(8, np.uint8)
    columns = []
    for slot, bits in ((1, 2), (4, 1)):
        a.outputs["guard_slot"][:1] = [slot]
        a.outputs["guard_bits"][:1] = [bits]
        a.counts[COUNT_GUARDS] = 1
        batch = action_pb2.ActionBatch()
        build_actions(
            KernelConfig(),
            a=a,
            registry=Registry("w", [f"ori-{i}" for i in range(6)], ["t"] * 6),
            decoded=DecodedBatch(Encoding.COLUMNS_FULL, 4, None, {}),
            guards=guard_stamps(a),
            merged_payloads={},
            row_codec=PythonRowCodec(),
            batch=batch,
            marks=marks,
        )
        columns.append(np.frombuffer(batch.columns.guard_bits, ACTION_COLUMNS["guard_bits"]).tolist())
    assert columns == [[0, 2, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0]]
    assert not marks.any()
