"""Cognition-call candidates: len/4 token estimates, class-rate costs, and cross-tier batching."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egbe.v1 import action_pb2, common_pb2
from kernel_service.config import KernelConfig

TIER_NAMES = {
    common_pb2.COGNITION_TIER_CLOTHO: "clotho",
    common_pb2.COGNITION_TIER_LACHESIS: "lachesis",
    common_pb2.COGNITION_TIER_ATROPOS: "atropos",
}
# Reflection and summary calls are deferrable enough to coalesce; live planning never waits for a batch.
BATCHABLE_CAUSES = frozenset(
    {
        action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION,
        action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY,
        action_pb2.COGNITION_CAUSE_GUARD_REFLECTION,
    }
)


def token_estimate(config: KernelConfig, cause: int) -> int:
    """len/4 of the cause's nominal context, plus the fixed per-call overhead."""
    chars = config.context_chars
    lengths: dict[int, int] = {
        action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING: chars.clotho_live_planning,
        action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION: chars.lachesis_reflection,
        action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY: chars.atropos_summary,
        action_pb2.COGNITION_CAUSE_GUARD_REFLECTION: chars.guard_reflection,
        action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY: chars.escalation,
        action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL: chars.escalation,
        action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD: chars.escalation,
    }
    return lengths[cause] // 4 + config.batch_overhead_tokens


def cost_micro_usd(config: KernelConfig, tier: int, tokens: int) -> int:
    """Class rate per 1k tokens, rounded up so an estimate never undercounts."""
    return (tokens * config.class_rate(tier) + 999) // 1000


@dataclass(frozen=True)
class BatchingOutcome:
    """What cross-tier batching did to one tick's candidates."""

    groups: int
    overhead_tokens_saved: int
    savings_bp: int


def apply_cross_tier_batching(
    config: KernelConfig, candidates: Sequence[action_pb2.CognitionCallCandidate]
) -> BatchingOutcome:
    """Coalesce eligible same-model calls when there are enough and fewer groups than calls.

    The first call of a group carries the overhead; every other member's estimate drops by it.
    """
    eligible = [c for c in candidates if c.cause in BATCHABLE_CAUSES]
    groups: dict[str, list[action_pb2.CognitionCallCandidate]] = {}
    for candidate in eligible:
        groups.setdefault(candidate.model_route, []).append(candidate)
    if len(eligible) < config.batch_min_requests or len(groups) >= len(eligible):
        return BatchingOutcome(0, 0, 0)
    gross = sum(c.token_estimate for c in eligible)
    saved = 0
    coalesced = 0
    for route, members in groups.items():
        if len(members) < 2:
            continue
        coalesced += 1
        first = members[0]
        group_id = f"{first.ori.world_id}:{first.tick}:batch:{route}"
        for index, member in enumerate(members):
            member.batch_group = group_id
            if index:
                member.token_estimate -= config.batch_overhead_tokens
                member.cost_estimate_micro_usd = cost_micro_usd(config, member.tier, member.token_estimate)
                saved += config.batch_overhead_tokens
    return BatchingOutcome(coalesced, saved, saved * 10_000 // gross if gross else 0)
