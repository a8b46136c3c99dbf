"""Builds a tick's protobuf answer (actions in the batch's encoding, report, candidates, lifecycle)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf import struct_pb2

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


def guard_payloads(config: KernelConfig, a: AgentArrays, tick: int) -> dict[int, struct_pb2.Struct]:
    """The auditable stamp of every guard intervention this tick, by slot."""
    payloads: dict[int, struct_pb2.Struct] = {}
    count = int(a.counts[COUNT_GUARDS])
    for slot, bits in zip(
        a.outputs["guard_slot"][:count].tolist(), a.outputs["guard_bits"][:count].tolist(), strict=True
    ):
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
                "goal_ref": int(a.fields["seen_goal_ref"][slot]),
            }
        )
        payloads[slot] = payload
    return payloads


def _intent(
    a: AgentArrays, registry: Registry, slot: int, payloads: Mapping[int, struct_pb2.Struct]
) -> action_pb2.ActionIntent:
    f = a.fields
    intent = action_pb2.ActionIntent(
        slot=slot,
        ori_id=registry.ori_ids[slot],
        kind=action_pb2.ActionKind.ValueType(int(f["out_kind"][slot])),
        goal_ref=int(f["out_goal_ref"][slot]),
        priority=int(f["out_priority"][slot]),
        tier=common_pb2.CognitionTier.ValueType(int(f["tier"][slot])),
        source=action_pb2.ActionSource.ValueType(int(f["out_source"][slot])),
        plan_step=int(f["out_plan_step"][slot]),
    )
    if slot in payloads:
        intent.payload.CopyFrom(payloads[slot])
    return intent


def build_actions(
    a: AgentArrays, registry: Registry, decoded: DecodedBatch, payloads: Mapping[int, struct_pb2.Struct]
) -> action_pb2.ActionBatch:
    """Rows answer rows (request order); a full frame answers every slot; a delta answers what changed."""
    batch = action_pb2.ActionBatch(world_id=registry.world_id, tick=decoded.tick)
    if decoded.encoding is Encoding.ROWS:
        assert decoded.slots is not None
        batch.intents.extend(_intent(a, registry, slot, payloads) for slot in decoded.slots.tolist())
        return batch
    columns = batch.columns
    columns.layout_version = COLUMNS_LAYOUT_VERSION
    if decoded.encoding is Encoding.COLUMNS_FULL:
        columns.count = a.count
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, a.live(field).tobytes())
        payload_slots = sorted(payloads)
    else:
        changed = a.outputs["changed_slot"][: int(a.counts[COUNT_CHANGED])]
        if payloads:
            extra = np.fromiter(payloads, dtype=np.uint32, count=len(payloads))
            changed = np.union1d(changed, extra).astype(np.uint32)
        columns.count = len(changed)
        columns.slots = changed.astype("<u4").tobytes()
        for column, field in ACTION_COLUMN_FIELDS.items():
            setattr(columns, column, a.fields[field][changed].tobytes())
        payload_slots = sorted(payloads)
    columns.payloads.extend(
        action_pb2.ActionPayload(slot=slot, payload=payloads[slot]) for slot in payload_slots
    )
    return batch


def build_candidates(
    config: KernelConfig, a: AgentArrays, registry: Registry, tick: int
) -> list[action_pb2.CognitionCallCandidate]:
    """One candidate per call the core issued, with its estimate and route; batching not yet applied."""
    count = int(a.counts[COUNT_CANDIDATES])
    out = a.outputs
    candidates = []
    for slot, cause, bits in zip(
        out["candidate_slot"][:count].tolist(),
        out["candidate_cause"][:count].tolist(),
        out["candidate_bits"][:count].tolist(),
        strict=True,
    ):
        tier = common_pb2.CognitionTier.ValueType(int(a.fields["tier"][slot]))
        tokens = token_estimate(config, cause)
        candidates.append(
            action_pb2.CognitionCallCandidate(
                call_id=f"{registry.world_id}:{tick}:{slot}:{cause}",
                slot=slot,
                ori=registry.ori(slot),
                tier=tier,
                cause=cause,
                token_estimate=tokens,
                cost_estimate_micro_usd=cost_micro_usd(config, tier, tokens),
                model_route=config.tier_models[TIER_NAMES[tier]],
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
