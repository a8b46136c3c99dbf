"""Builds a tick's protobuf answer (actions in the batch's encoding, report, candidates, lifecycle)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf import struct_pb2
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2
from kernel_service.agent_state import (
    CANDIDATE_BIT_NEEDS_REHYDRATION,
    COUNT_CANDIDATES,
    COUNT_CHANGED,
    COUNT_GUARDS,
    COUNT_TRANSITIONS,
    GUARD_BIT_REPEATED_ACTION,
    GUARD_BIT_STALE_GOAL,
    AgentArrays,
)
from kernel_service.cognition_calls import (
    TIER_NAMES,
    apply_cross_tier_batching,
    cost_micro_usd,
    token_estimate,
)
from kernel_service.config import KernelConfig
from kernel_service.perception_codec import COLUMNS_LAYOUT_VERSION, DecodedBatch, Encoding
from kernel_service.row_codec import RowCodec

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
    count = int(a.counts[COUNT_GUARDS])
    return GuardStamps(a.outputs["guard_slot"][:count].copy(), a.outputs["guard_bits"][:count].copy())


def guard_payload(config: KernelConfig, bits: int, tick: int) -> struct_pb2.Struct:
    """The auditable stamp a guard puts on the action it rewrote (the action carries the goal)."""
    guards = []
    if bits & GUARD_BIT_REPEATED_ACTION:
        guards.append("repeated-action")
    if bits & GUARD_BIT_STALE_GOAL:
        guards.append("stale-goal")
    payload = struct_pb2.Struct()
    payload.update(
        {
            "schema": GUARD_PAYLOAD_SCHEMA,
            "guards": guards,
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
    merged_payloads: Mapping[int, struct_pb2.Struct],
    row_codec: RowCodec,
    batch: action_pb2.ActionBatch,
) -> None:
    """Fill `batch` in place (large columns are never copied twice): rows answer rows in request
    order; a full frame answers every slot; a delta answers what changed."""
    batch.world_id = registry.world_id
    batch.tick = decoded.tick
    guards = guard_stamps(a)
    if decoded.encoding is Encoding.ROWS:
        assert decoded.slots is not None
        payloads = _row_payloads(config, decoded.tick, guards, merged_payloads)
        _fill_rows(batch, a, registry, decoded.slots, payloads, row_codec=row_codec)
        return
    columns = batch.columns
    columns.layout_version = COLUMNS_LAYOUT_VERSION
    guard_bits = np.zeros(a.count, dtype=np.uint8)
    guard_bits[guards.slots] = guards.bits
    if decoded.encoding is Encoding.COLUMNS_FULL:
        columns.count = a.count
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, a.live(field).tobytes())
        answered_guard_bits = guard_bits
    else:
        # What changed, plus any agent carrying a guard stamp or a merged result this tick.
        mask = np.zeros(a.count, dtype=bool)
        mask[a.outputs["changed_slot"][: int(a.counts[COUNT_CHANGED])]] = True
        mask[guards.slots] = True
        if merged_payloads:
            mask[np.fromiter(merged_payloads, dtype=np.uint32, count=len(merged_payloads))] = True
        answered = np.flatnonzero(mask).astype("<u4")
        columns.count = len(answered)
        columns.slots = answered.tobytes()
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, a.fields[field][answered].tobytes())
        answered_guard_bits = guard_bits[answered]
    if len(guards.slots):
        columns.guard_bits = answered_guard_bits.tobytes()
    columns.payloads.extend(
        action_pb2.ActionPayload(slot=slot, payload=merged_payloads[slot]) for slot in sorted(merged_payloads)
    )


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
    config: KernelConfig, a: AgentArrays, registry: Registry, tick: int
) -> list[action_pb2.CognitionCallCandidate]:
    """One candidate per call the core issued, with its estimate and route; batching not yet applied."""
    count = int(a.counts[COUNT_CANDIDATES])
    out = a.outputs
    slots = out["candidate_slot"][:count]
    # The estimate and route depend only on (tier, cause): worked out once each, not once per call.
    estimates: dict[tuple[int, int], tuple[int, int, str]] = {}
    candidates = []
    for slot, tier_value, cause, bits in zip(
        slots.tolist(),
        a.fields["tier"][slots].tolist(),
        out["candidate_cause"][:count].tolist(),
        out["candidate_bits"][:count].tolist(),
        strict=True,
    ):
        tier = common_pb2.CognitionTier.ValueType(tier_value)
        estimate = estimates.get((tier, cause))
        if estimate is None:
            tokens = token_estimate(config, cause)
            estimate = (tokens, cost_micro_usd(config, tier, tokens), config.tier_models[TIER_NAMES[tier]])
            estimates[tier, cause] = estimate
        tokens, cost, route = estimate
        candidates.append(
            action_pb2.CognitionCallCandidate(
                call_id=f"{registry.world_id}:{tick}:{slot}:{cause}",
                slot=slot,
                ori=registry.ori(slot),
                tier=tier,
                cause=cause,
                token_estimate=tokens,
                cost_estimate_micro_usd=cost,
                model_route=route,
                tick=tick,
                needs_rehydration=bool(bits & CANDIDATE_BIT_NEEDS_REHYDRATION),
            )
        )
    return candidates


def build_lifecycle(a: AgentArrays, registry: Registry, tick: int) -> list[action_pb2.LifecycleRequest]:
    """Escalation into Clotho asks for rehydration; any fall in fidelity asks for consolidation."""
    count = int(a.counts[COUNT_TRANSITIONS])
    out = a.outputs
    requests = []
    for slot, before, after in zip(
        out["transition_slot"][:count].tolist(),
        out["transition_from"][:count].tolist(),
        out["transition_to"][:count].tolist(),
        strict=True,
    ):
        if after == common_pb2.COGNITION_TIER_CLOTHO:
            kind = action_pb2.LifecycleRequest.KIND_REHYDRATE
        elif before != common_pb2.COGNITION_TIER_UNSPECIFIED and after > before:
            kind = action_pb2.LifecycleRequest.KIND_CONSOLIDATE
        else:
            continue
        requests.append(
            action_pb2.LifecycleRequest(
                kind=kind, ori=registry.ori(slot), slot=slot, from_tier=before, to_tier=after, tick=tick
            )
        )
    return requests


def build_report(
    config: KernelConfig,
    *,
    a: AgentArrays,
    registry: Registry,
    tick: int,
    candidates: Sequence[action_pb2.CognitionCallCandidate],
    core_name: str,
    fingerprint: common_pb2.ConfigFingerprint,
    merged: int,
) -> action_pb2.KernelTickReport:
    """Everything but elapsed time, which the caller stamps last (it is measured, not decided)."""
    batching = apply_cross_tier_batching(config, candidates)
    transitions = int(a.counts[COUNT_TRANSITIONS])
    initial = int(np.count_nonzero(a.outputs["transition_from"][:transitions] == 0))
    return action_pb2.KernelTickReport(
        world_id=registry.world_id,
        tick=tick,
        latency_budget_micros=config.latency_budget_micros,
        clotho_count=int(a.tier_counts[common_pb2.COGNITION_TIER_CLOTHO]),
        lachesis_count=int(a.tier_counts[common_pb2.COGNITION_TIER_LACHESIS]),
        atropos_count=int(a.tier_counts[common_pb2.COGNITION_TIER_ATROPOS]),
        reason_counts=[
            action_pb2.TierReasonCount(reason=action_pb2.TierReason.ValueType(reason), count=int(count))
            for reason, count in enumerate(a.reason_counts.tolist())
            if count
        ],
        calls_issued=len(candidates),
        estimated_tokens=sum(c.token_estimate for c in candidates),
        estimated_cost_micro_usd=sum(c.cost_estimate_micro_usd for c in candidates),
        batched_call_groups=batching.groups,
        batching_overhead_tokens_saved=batching.overhead_tokens_saved,
        batching_savings_bp=batching.savings_bp,
        guard_interventions=int(a.counts[COUNT_GUARDS]),
        tier_transitions=transitions - initial,
        core=core_name,
        config_fingerprint=fingerprint,
        cognition_results_merged=merged,
    )
