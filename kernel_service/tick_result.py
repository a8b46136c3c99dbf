"""Builds a tick's protobuf answer (actions in the batch's encoding, report, candidates, lifecycle)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import struct_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2
from kernel_service.agent_state import (
    COUNT_CANDIDATES,
    COUNT_CHANGED,
    COUNT_GUARDS,
    COUNT_TRANSITIONS,
    AgentArrays,
    guard_names,
)
from kernel_service.behavior_seam import Escalations
from kernel_service.cognition_calls import CallEstimates, CallTables, estimate_calls
from kernel_service.config import KernelConfig
from kernel_service.perception_codec import DecodedBatch, Encoding
from kernel_service.row_codec import Calls, RowCodec
from kernel_service.wire_bytes import field_tag, varint
from services.column_layout import ACTION_COLUMNS, LAYOUT_VERSION, SLOT_DTYPE

ACTION_WIRE_DTYPES = {**ACTION_COLUMNS, "slots": SLOT_DTYPE}

GUARD_PAYLOAD_SCHEMA = "egbe.moirai.loop-drift-guard.1"
ACTION_COLUMN_FIELDS = {
    "kind": "out_kind",
    "source": "out_source",
    "tier": "tier",
    "priority": "out_priority",
    "goal_ref": "out_goal_ref",
    "plan_step": "out_plan_step",
    "tier_reason": "tier_reason",
}


@dataclass(frozen=True)
class Registry:
    """Who lives in each slot."""

    world_id: str
    ori_ids: Sequence[str]
    tenant_ids: Sequence[str]

    def ori(self, slot: int) -> common_pb2.OriRef:
        return common_pb2.OriRef(
            tenant_id=self.tenant_ids[slot], world_id=self.world_id, ori_id=self.ori_ids[slot]
        )


@dataclass(frozen=True)
class GuardStamps:
    """This tick's guard interventions: slots (slot order) and which guards fired for each."""

    slots: NDArray[np.uint32]
    bits: NDArray[np.uint8]


def guard_stamps(a: AgentArrays) -> GuardStamps:
    """The core's guard list as it stands after a tick (views: read them before the next tick)."""
    count = int(a.counts[COUNT_GUARDS])
    return GuardStamps(a.outputs["guard_slot"][:count], a.outputs["guard_bits"][:count])


def guard_payload(config: KernelConfig, bits: int, tick: int) -> struct_pb2.Struct:
    """The auditable stamp a guard puts on the action it rewrote (the action carries the goal)."""
    payload = struct_pb2.Struct()
    payload.update(
        {
            "schema": GUARD_PAYLOAD_SCHEMA,
            "guards": guard_names(bits),
            "tick": str(tick),
            "repeated_action_limit": config.repeated_action_limit,
            "stale_goal_tick_limit": config.stale_goal_tick_limit,
        }
    )
    return payload


def _row_payloads(
    config: KernelConfig,
    tick: int,
    guards: GuardStamps,
    merged: Mapping[int, struct_pb2.Struct],
) -> dict[int, struct_pb2.Struct]:
    """Payload per slot for the row form: a merged cognition result's, else the guard stamp."""
    variants = {bits: guard_payload(config, bits, tick) for bits in set(guards.bits.tolist())}
    payloads = {
        slot: variants[bits] for slot, bits in zip(guards.slots.tolist(), guards.bits.tolist(), strict=True)
    }
    payloads.update(merged)
    return payloads


def build_actions(
    config: KernelConfig,
    *,
    a: AgentArrays,
    registry: Registry,
    decoded: DecodedBatch,
    guards: GuardStamps,
    merged_payloads: Mapping[int, struct_pb2.Struct],
    row_codec: RowCodec,
    batch: action_pb2.ActionBatch,
    marks: NDArray[np.uint8],
) -> None:
    """Fill `batch` in place (large columns are never copied twice): rows answer rows in request
    order; a full frame answers every slot; a delta answers what changed.

    `marks` is a zeroed byte per slot (at least `a.count`), left zeroed: a full answer's guard
    column (and the Python codec's delta union) is worked out in it. A fresh one per tick cost
    ~0.7 ms at a million agents (its pages faulted in anew each time), more than the marking."""
    batch.world_id = registry.world_id
    batch.tick = decoded.tick
    if decoded.encoding is Encoding.ROWS:
        assert decoded.slots is not None
        payloads = _row_payloads(config, decoded.tick, guards, merged_payloads)
        _fill_rows(batch, a, registry, decoded.slots, payloads, row_codec=row_codec)
        return
    columns = batch.columns
    columns.layout_version = LAYOUT_VERSION
    if decoded.encoding is Encoding.COLUMNS_FULL:
        columns.count = a.count
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, _wire(column, a.live(field)))
        if len(guards.slots):
            guard_bits = marks[: a.count]
            guard_bits[guards.slots] = guards.bits
            columns.guard_bits = guard_bits.tobytes()
            guard_bits[guards.slots] = 0
    else:
        answered, guard_bits = _delta_answer(a, guards, merged_payloads, marks, row_codec)
        index = answered.astype(np.intp)
        columns.count = len(answered)
        columns.slots = _wire("slots", answered)
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, _wire(column, a.fields[field].take(index)))
        if len(guards.slots):
            columns.guard_bits = _wire("guard_bits", guard_bits)
    columns.payloads.extend(
        action_pb2.ActionPayload(slot=slot, payload=merged_payloads[slot]) for slot in sorted(merged_payloads)
    )


def _wire(column: str, values: NDArray[Any]) -> bytes:
    """One column in its wire dtype (a no-op cast on a little-endian host)."""
    return values.astype(ACTION_WIRE_DTYPES[column], copy=False).tobytes()


def _delta_answer(
    a: AgentArrays,
    guards: GuardStamps,
    merged: Mapping[int, struct_pb2.Struct],
    marks: NDArray[np.uint8],
    row_codec: RowCodec,
) -> tuple[NDArray[np.integer[Any]], NDArray[np.uint8]]:
    """Who a delta answers, in slot order, and their guard bits: the agents whose answer changed (the
    core lists them, in slot order), plus any carrying a guard stamp or a merged result this tick;
    the changed list itself when there are none of those."""
    changed = a.outputs["changed_slot"][: int(a.counts[COUNT_CHANGED])]
    if not merged and not len(guards.slots):
        return changed, np.zeros(len(changed), dtype=np.uint8)
    merged_slots = np.array(sorted(merged), dtype=np.uint32)
    return row_codec.answered_slots(changed, guards.slots, guards.bits, merged_slots, marks[: a.count])


def _fill_rows(
    batch: action_pb2.ActionBatch,
    a: AgentArrays,
    registry: Registry,
    slots: NDArray[np.uint32],
    payloads: Mapping[int, struct_pb2.Struct],
    *,
    row_codec: RowCodec,
) -> None:
    row_codec.write_intents(batch, slots, a.fields, registry.ori_ids)
    if payloads:
        index_of = {slot: index for index, slot in enumerate(slots.tolist()) if slot in payloads}
        for slot, index in index_of.items():
            batch.intents[index].payload.CopyFrom(payloads[slot])


def build_candidates(
    tables: CallTables,
    a: AgentArrays,
    registry: Registry,
    tick: int,
    *,
    escalations: Escalations,
    dialogue: NDArray[np.uint32],
    row_codec: RowCodec,
    result: action_pb2.TickResult,
) -> tuple[CallEstimates, NDArray[np.uint32]]:
    """One candidate per call the core issued (slot order), then per escalation arbitration sent
    (Lachesis), then per `dialogue` slot (a player's line this tick) neither already called: its
    deterministic call id, len/4 estimate, class-rate cost, route and batch group.

    Estimates and batching are worked out over the arrays first, then the codec writes each message
    once, complete (the C codec as wire bytes); the returned estimates feed the report, the returned
    slots (index for index with the candidates) the dispatcher's moments."""
    count = int(a.counts[COUNT_CANDIDATES])
    out = a.outputs
    slots = out["candidate_slot"][:count]
    causes = out["candidate_cause"][:count]
    tiers = a.fields["tier"].take(slots.astype(np.intp))
    bits = out["candidate_bits"][:count]
    if len(escalations.slots):
        slots = np.concatenate([slots, escalations.slots])
        causes = np.concatenate([causes, escalations.causes])
        tiers = np.concatenate(
            [tiers, np.full(len(escalations.slots), common_pb2.COGNITION_TIER_LACHESIS, np.uint8)]
        )
        bits = np.concatenate([bits, np.zeros(len(escalations.slots), np.uint8)])
    if len(dialogue):
        slots, causes, tiers, bits = _with_dialogue(a, dialogue, (slots, causes, tiers, bits))
    estimates = estimate_calls(tables, world_id=registry.world_id, tick=tick, causes=causes, tiers=tiers)
    if len(slots):
        row_codec.write_candidates(
            result,
            Calls(
                world_id=registry.world_id,
                tick=tick,
                slots=slots,
                causes=causes,
                tiers=tiers,
                bits=bits,
                estimates=estimates,
                routes=tables.route_by_tier,
                ori_ids=registry.ori_ids,
                tenant_ids=registry.tenant_ids,
            ),
        )
    return estimates, slots


_CallColumns = tuple[NDArray[np.uint32], NDArray[np.uint8], NDArray[np.uint8], NDArray[np.uint8]]


def _with_dialogue(a: AgentArrays, dialogue: NDArray[np.uint32], calls: _CallColumns) -> _CallColumns:
    """One call per addressed slot this tick: a call already issued for it becomes a dialogue call
    (the core's own list is copied, not rewritten); every other addressed slot gets one at its tier.
    `calls`: slots, causes, tiers and candidate bits, index for index."""
    slots, causes, tiers, bits = calls
    causes = np.where(np.isin(slots, dialogue), np.uint8(action_pb2.COGNITION_CAUSE_DIALOGUE), causes)
    extra = dialogue[~np.isin(dialogue, slots)]
    return (
        np.concatenate([slots, extra]),
        np.concatenate([causes, np.full(len(extra), action_pb2.COGNITION_CAUSE_DIALOGUE, np.uint8)]),
        np.concatenate([tiers, a.fields["tier"].take(extra.astype(np.intp))]),
        np.concatenate([bits, np.zeros(len(extra), np.uint8)]),
    )


def build_lifecycle(
    a: AgentArrays,
    registry: Registry,
    tick: int,
    into: RepeatedCompositeFieldContainer[action_pb2.LifecycleRequest],
) -> None:
    """Escalation into Clotho asks for rehydration; any fall in fidelity asks for consolidation.

    The transitions that ask for nothing (first tiers, other escalations) are dropped in numpy first."""
    count = int(a.counts[COUNT_TRANSITIONS])
    if count == 0:
        return
    out = a.outputs
    before = out["transition_from"][:count]
    after = out["transition_to"][:count]
    rehydrate = after == common_pb2.COGNITION_TIER_CLOTHO
    consolidate = ~rehydrate & (before != common_pb2.COGNITION_TIER_UNSPECIFIED) & (after > before)
    kept = np.flatnonzero(rehydrate | consolidate)
    if len(kept) == 0:
        return
    world, ori_ids, tenant_ids = registry.world_id, registry.ori_ids, registry.tenant_ids
    add = into.add
    for slot, was, now, escalates in zip(
        out["transition_slot"][kept].tolist(),
        before[kept].tolist(),
        after[kept].tolist(),
        rehydrate[kept].tolist(),
        strict=True,
    ):
        request = add(
            kind=action_pb2.LifecycleRequest.KIND_REHYDRATE
            if escalates
            else action_pb2.LifecycleRequest.KIND_CONSOLIDATE,
            slot=slot,
            from_tier=was,
            to_tier=now,
            tick=tick,
        )
        ori = request.ori
        ori.tenant_id = tenant_ids[slot]
        ori.world_id = world
        ori.ori_id = ori_ids[slot]


def report_constants(
    config: KernelConfig, core_name: str, fingerprint: common_pb2.ConfigFingerprint
) -> bytes:
    """The report fields that change with the kernel, not the tick, as wire bytes (built once)."""
    return action_pb2.KernelTickReport(
        latency_budget_micros=config.latency_budget_micros, core=core_name, config_fingerprint=fingerprint
    ).SerializeToString(deterministic=True)


_REASON_COUNTS_TAG = field_tag(action_pb2.KernelTickReport.REASON_COUNTS_FIELD_NUMBER, 2)


def fill_report(
    report: action_pb2.KernelTickReport,
    constants: bytes,
    *,
    a: AgentArrays,
    registry: Registry,
    tick: int,
    estimates: CallEstimates,
    merged: int,
) -> None:
    """Everything but elapsed time, which the caller stamps last (it is measured, not decided). The
    constants and the reason counts go in as one parse of their wire bytes (TierReasonCount: reason
    1, count 2; a reason below 128 is one byte): building a message per reason and copying the
    report in cost ~15 µs a tick."""
    wire = [constants]
    for reason, count in enumerate(a.reason_counts.tolist()):
        if count:
            encoded = varint(count)
            wire += (_REASON_COUNTS_TAG, varint(3 + len(encoded)), b"\x08", varint(reason), b"\x10", encoded)
    report.MergeFromString(b"".join(wire))
    transitions = int(a.counts[COUNT_TRANSITIONS])
    initial = int(np.count_nonzero(a.outputs["transition_from"][:transitions] == 0))
    tiers = a.tier_counts.tolist()
    report.world_id = registry.world_id
    report.tick = tick
    report.clotho_count = tiers[common_pb2.COGNITION_TIER_CLOTHO]
    report.lachesis_count = tiers[common_pb2.COGNITION_TIER_LACHESIS]
    report.atropos_count = tiers[common_pb2.COGNITION_TIER_ATROPOS]
    report.calls_issued = len(estimates.tokens)
    report.estimated_tokens = int(estimates.tokens.sum())
    report.estimated_cost_micro_usd = int(estimates.costs.sum())
    report.batched_call_groups = estimates.groups
    report.batching_overhead_tokens_saved = estimates.overhead_tokens_saved
    report.batching_savings_bp = estimates.savings_bp
    report.guard_interventions = int(a.counts[COUNT_GUARDS])
    report.tier_transitions = transitions - initial
    report.cognition_results_merged = merged


def build_tick_result(
    result: action_pb2.TickResult,
    config: KernelConfig,
    *,
    call_tables: CallTables,
    a: AgentArrays,
    registry: Registry,
    decoded: DecodedBatch,
    escalations: Escalations,
    guards: GuardStamps,
    merged_payloads: Mapping[int, struct_pb2.Struct],
    merged_count: int,
    row_codec: RowCodec,
    constants: bytes,
    marks: NDArray[np.uint8],
) -> NDArray[np.uint32]:
    """Fill the empty `result` with the tick's whole answer but its elapsed time; returns the slot of
    each candidate, index for index. Every part is built in place, in the message the servicer sends:
    a million-agent answer is megabytes, and copying a message copies all of it."""
    estimates, call_slots = build_candidates(
        call_tables,
        a,
        registry,
        decoded.tick,
        escalations=escalations,
        dialogue=decoded.situations.dialogue,
        row_codec=row_codec,
        result=result,
    )
    fill_report(
        result.report,
        constants,
        a=a,
        registry=registry,
        tick=decoded.tick,
        estimates=estimates,
        merged=merged_count,
    )
    build_lifecycle(a, registry, decoded.tick, result.lifecycle)
    build_actions(
        config,
        a=a,
        registry=registry,
        decoded=decoded,
        guards=guards,
        merged_payloads=merged_payloads,
        row_codec=row_codec,
        batch=result.actions,
        marks=marks,
    )
    return call_slots
