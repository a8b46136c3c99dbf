"""Budget arithmetic: clamp each request to its tier cap, then draw on the world cap in tier order; and
whether a model call still fits its run's budget (`call_grant`)."""

from __future__ import annotations

from dataclasses import dataclass

from egbe.v1 import common_pb2
from gateway.config import TIER_NAMES, BudgetConfig
from gateway.errors import BudgetExhausted
from gateway.records import CallGrant, RunSpec
from services.errors import FieldViolation, InvalidArgument

BASIS_POINTS = 10_000
# Clotho is served first, then Lachesis, then Atropos (the work no player can see defers first).
TIER_PRIORITY = (
    common_pb2.COGNITION_TIER_CLOTHO,
    common_pb2.COGNITION_TIER_LACHESIS,
    common_pb2.COGNITION_TIER_ATROPOS,
)


@dataclass(frozen=True)
class TokenRequest:
    ori_id: str
    tier: int
    requested_tokens: int


@dataclass(frozen=True)
class Allocation:
    request: TokenRequest
    tier_capped_tokens: int
    allowed_tokens: int

    @property
    def deferred_tokens(self) -> int:
        return self.tier_capped_tokens - self.allowed_tokens

    @property
    def over_tier_budget(self) -> bool:
        return self.request.requested_tokens > self.tier_capped_tokens

    @property
    def blocked_by_world_cap(self) -> bool:
        return self.deferred_tokens > 0


@dataclass(frozen=True)
class BudgetEvaluation:
    allocations: list[Allocation]
    world_cap_tokens: int

    @property
    def total_allowed_tokens(self) -> int:
        return sum(a.allowed_tokens for a in self.allocations)

    @property
    def total_deferred_tokens(self) -> int:
        return sum(a.deferred_tokens for a in self.allocations)

    @property
    def world_cap_held(self) -> bool:
        return self.total_allowed_tokens <= self.world_cap_tokens


def resolve_world_cap(config: BudgetConfig, homestead_rest_bp: int = 0, override_tokens: int = 0) -> int:
    """The effective cap: an override or the configured cap, lowered (never raised) by homestead rest:
    the configured multiplier, and a request's own (0: none) only where it is lower still."""
    if homestead_rest_bp < 0:
        raise InvalidArgument.field("homestead_rest_bp", "must be >= 0")
    base = override_tokens or config.world_cap_tokens_per_hour
    multiplier = min(homestead_rest_bp or BASIS_POINTS, config.homestead_rest_bp, BASIS_POINTS)
    return base * multiplier // BASIS_POINTS


def evaluate_budget(
    requests: list[TokenRequest], config: BudgetConfig, world_cap_tokens: int
) -> BudgetEvaluation:
    """Clamp each request to its tier cap, then grant in tier priority order, never overspending."""
    violations = [
        FieldViolation(f"requests[{i}].tier", "must be CLOTHO, LACHESIS or ATROPOS")
        for i, r in enumerate(requests)
        if r.tier not in TIER_PRIORITY
    ]
    violations += [
        FieldViolation(f"requests[{i}].requested_tokens", "must be >= 0")
        for i, r in enumerate(requests)
        if r.requested_tokens < 0
    ]
    if violations:
        raise InvalidArgument(violations)
    order = sorted(range(len(requests)), key=lambda i: (TIER_PRIORITY.index(requests[i].tier), i))
    remaining = world_cap_tokens
    granted: dict[int, Allocation] = {}
    for i in order:
        request = requests[i]
        capped = min(request.requested_tokens, config.tier_budgets.cap_for(request.tier))
        allowed = min(capped, remaining)
        remaining -= allowed
        granted[i] = Allocation(request, capped, allowed)
    return BudgetEvaluation([granted[i] for i in range(len(requests))], world_cap_tokens)


# The launch-ceiling Solo population and how many budget units each spends per real hour.
WORST_CASE_POPULATION = {
    common_pb2.COGNITION_TIER_CLOTHO: (24, 60),  # 24 active-scene Ori x 60 active-minutes
    common_pb2.COGNITION_TIER_LACHESIS: (400, 6),  # 400 residents x 6 reflections (every 10 game-minutes)
    common_pb2.COGNITION_TIER_ATROPOS: (1_000, 1),  # 1,000 distant Ori x 1 game-day summary budget
}


def worst_case_requests(config: BudgetConfig) -> list[TokenRequest]:
    """One full-cap request per budget unit each ceiling Ori spends in a real hour."""
    requests = []
    for tier, (population, units) in WORST_CASE_POPULATION.items():
        cap = config.tier_budgets.cap_for(tier)
        requests += [
            TokenRequest(f"worst-case-{TIER_NAMES[tier]}-{n}", tier, cap)
            for n in range(population)
            for _ in range(units)
        ]
    return requests


def call_grant(
    run: RunSpec, *, model_calls: int, used_tokens: int, input_tokens: int, max_output_tokens: int
) -> CallGrant:
    """A model call fits the run's budget (calls and tokens so far); else RESOURCE_EXHAUSTED naming the
    limit. The grant's output tokens are what the run has left after the prompt."""
    if model_calls >= run.max_model_calls:
        raise BudgetExhausted(
            f"run {run.run_id} used all {run.max_model_calls} model calls of its "
            f"{run.tier_name} budget (max_model_calls)",
            limit="max_model_calls",
            run_id=run.run_id,
        )
    remaining = run.max_tokens - used_tokens
    if input_tokens >= remaining:
        raise BudgetExhausted(
            f"run {run.run_id} has {max(remaining, 0)} of its {run.max_tokens} tokens left and the "
            f"prompt needs {input_tokens} (max_tokens)",
            limit="max_tokens",
            run_id=run.run_id,
        )
    return CallGrant(run, model_calls + 1, min(max_output_tokens, remaining - input_tokens))
