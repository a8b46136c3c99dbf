"""A delta answer lists every agent that changed, carries a guard stamp or a merged result, once each."""

from __future__ import annotations

import numpy as np
from google.protobuf import struct_pb2

from egbe.v1 import action_pb2
from kernel_service.agent_state import COUNT_CHANGED, COUNT_GUARDS, AgentArrays
from kernel_service.config import KernelConfig
from kernel_service.perception_codec import DecodedBatch, Encoding
from kernel_service.row_codec import PythonRowCodec
from kernel_service.tick_result import Registry, build_actions, guard_stamps
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
    build_actions(
        KernelConfig(),
        a=a,
        registry=Registry("w", [f"ori-{i}" for i in range(10)], ["t"] * 10),
        decoded=DecodedBatch(Encoding.COLUMNS_DELTA, 4, np.array([2], dtype=np.uint32), {}),
        guards=guard_stamps(a),
        merged_payloads={3: payload},
        row_codec=PythonRowCodec(),
        batch=batch,
    )
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
    build_actions(
        KernelConfig(),
        a=a,
        registry=Registry("w", [f"ori-{i}" for i in range(10)], ["t"] * 10),
        decoded=DecodedBatch(Encoding.COLUMNS_DELTA, 4, np.array([2], dtype=np.uint32), {}),
        guards=guard_stamps(a),
        merged_payloads={},
        row_codec=PythonRowCodec(),
        batch=batch,
    )
    columns = batch.columns
    assert columns.count == 3
    assert np.frombuffer(columns.slots, SLOT_DTYPE).tolist() == [0, 4, 9]
    assert np.frombuffer(columns.kind, ACTION_COLUMNS["kind"]).tolist() == [1, 5, 10]
    assert columns.guard_bits == b""  # no guard fired: the column stays empty
