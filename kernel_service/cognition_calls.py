"""Cognition-call candidates: len/4 token estimates, class-rate costs, and cross-tier batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2
from kernel_service.config import KernelConfig
from services.vocabulary import TIER_NAMES

# Reflection and summary calls are deferrable enough to coalesce; live planning and dialogue never wait
# for a batch.
BATCHABLE_CAUSES = frozenset(
    {
        action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION,
        action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY,
        action_pb2.COGNITION_CAUSE_GUARD_REFLECTION,
    }
)
_BATCHABLE = np.isin(np.arange(256), sorted(BATCHABLE_CAUSES))  # by CognitionCause


_ESTIMATED_CAUSES = (
    action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
    action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION,
    action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY,
    action_pb2.COGNITION_CAUSE_GUARD_REFLECTION,
    action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD,
    action_pb2.COGNITION_CAUSE_DIALOGUE,
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
        action_pb2.COGNITION_CAUSE_DIALOGUE: chars.dialogue,
    }
    return lengths[cause] // 4 + config.batch_overhead_tokens


def cost_micro_usd(config: KernelConfig, tier: int, tokens: int) -> int:
    """Class rate per 1k tokens, rounded up so an estimate never undercounts."""
    return (tokens * config.class_rate(tier) + 999) // 1000


@dataclass(frozen=True)
class CallEstimates:
    """One tick's calls after cross-tier batching, index for index with the calls it was given:
    each call's token and cost estimate and batch group (an index into `group_ids`, -1 when not
    coalesced), and the totals."""

    tokens: NDArray[np.int64]
    costs: NDArray[np.int64]
    group_of: NDArray[np.int32]
    group_ids: list[str]
    overhead_tokens_saved: int
    savings_bp: int

    @property
    def groups(self) -> int:
        return len(self.group_ids)


@dataclass(frozen=True)
class CallTables:
    """A config's estimate inputs as lookup tables (built once per kernel, like CoreParams): tokens
    by CognitionCause, class rate and model route by CognitionTier."""

    config: KernelConfig
    token_of: NDArray[np.int64]
    rate_of: NDArray[np.int64]
    route_of: NDArray[np.intp]  # index into routes; tiers sharing a model share a route
    routes: list[str]
    route_by_tier: dict[int, str]

    @classmethod
    def from_config(cls, config: KernelConfig) -> CallTables:
        token_of = np.zeros(256, dtype=np.int64)
        for cause in _ESTIMATED_CAUSES:
            token_of[cause] = token_estimate(config, cause)
        route_by_tier = {int(tier): config.tier_models[name] for tier, name in TIER_NAMES.items()}
        routes = list(dict.fromkeys(route_by_tier.values()))
        rate_of = np.zeros(256, dtype=np.int64)
        route_of = np.zeros(256, dtype=np.intp)
        for tier, route in route_by_tier.items():
            rate_of[tier] = config.class_rate(tier)
            route_of[tier] = routes.index(route)
        return cls(config, token_of, rate_of, route_of, routes, route_by_tier)


def estimate_calls(
    tables: CallTables,
    *,
    world_id: str,
    tick: int,
    causes: NDArray[np.integer[Any]],
    tiers: NDArray[np.integer[Any]],
) -> CallEstimates:
    """Estimate each call, then coalesce eligible same-model calls when there are enough and fewer
    groups than calls.

    The first call of a group (in the given order) carries the overhead; every other member's
    estimate drops by it. Worked out over the arrays, before any candidate message exists: a tick
    can issue thousands of calls, and reading and rewriting messages costs far more than integers."""
    config, routes = tables.config, tables.routes
    count = len(causes)
    token_of, rate_of, route_of = tables.token_of, tables.rate_of, tables.route_of
    tokens = token_of[causes]
    group_of = np.full(count, -1, dtype=np.int32)
    group_ids: list[str] = []
    eligible = np.flatnonzero(_BATCHABLE[causes])
    saved = gross = 0
    # Fewer groups than calls needs two eligible calls at least: most ticks stop here.
    if len(eligible) >= max(2, config.batch_min_requests):
        eligible_routes = route_of[tiers[eligible]]
        present = sorted(set(eligible_routes.tolist()))
        if len(present) >= len(eligible):
            present = []
        else:
            gross = int(tokens[eligible].sum())
        for route in present:
            members = eligible[eligible_routes == route]
            if len(members) < 2:
                continue
            group_of[members] = len(group_ids)
            group_ids.append(f"{world_id}:{tick}:batch:{routes[route]}")
            tokens[members[1:]] -= config.batch_overhead_tokens
            saved += config.batch_overhead_tokens * (len(members) - 1)
    # cost_micro_usd over the arrays: the class rate per 1k tokens, rounded up.
    costs = (tokens * rate_of[tiers] + 999) // 1000
    return CallEstimates(
        tokens=tokens,
        costs=costs,
        group_of=group_of,
        group_ids=group_ids,
        overhead_tokens_saved=saved,
        savings_bp=saved * 10_000 // gross if gross else 0,
    )
