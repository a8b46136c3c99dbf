"""Smallest-qualified routing, its governance checks, and the config fingerprint."""

from __future__ import annotations

import pytest

from gateway.config import AGENT_BEHAVIOR_EVAL_GATE, GatewayConfig, ModelCandidate, RoutingConfig, TierRoute
from gateway.routing import config_fingerprint, config_violations, routing_violations, select_route
from services.errors import InvalidArgument
from tests.gateway.harness import ATROPOS, CLOTHO, LACHESIS


def test_each_tier_routes_to_the_smallest_model_that_clears_its_bar() -> None:
    routing = RoutingConfig()
    routes = {tier: select_route(routing, tier) for tier in (CLOTHO, LACHESIS, ATROPOS)}
    assert {t: r.model_class for t, r in routes.items()} == {
        CLOTHO: "opus-class",
        LACHESIS: "sonnet-class",
        ATROPOS: "haiku-class",
    }
    assert all(r.smallest_qualified for r in routes.values())
    assert [r.required_quality_bp for r in routes.values()] == [9_500, 9_000, 8_000]
    assert routes[LACHESIS].model_ref == "anthropic:claude-sonnet-class-latest"
    assert routes[LACHESIS].concrete_model_id == routing.model_ids["sonnet-class"]
    assert routing_violations(routing) == []


def test_a_larger_than_smallest_qualified_selection_is_rejected() -> None:
    routing = RoutingConfig().model_copy(
        update={
            "atropos": TierRoute(
                eval_suite="narrative-summary-continuity",
                required_quality_bp=8_000,
                selected_model_class="opus-class",
            )
        }
    )
    [violation] = routing_violations(routing)
    assert violation.field == "routing.atropos.selected_model_class"
    assert "larger than the smallest qualified haiku-class" in violation.description


def test_disabling_the_small_model_moves_the_smallest_qualified_up() -> None:
    candidates = [
        c.model_copy(update={"enabled": c.model_class != "haiku-class"}) for c in RoutingConfig().candidates
    ]
    routing = RoutingConfig(candidates=candidates)
    [violation] = routing_violations(routing)  # haiku is still selected for Atropos but is off
    assert violation.field == "routing.atropos.selected_model_class"


def test_re_run_scripts_must_carry_the_agent_behaviour_eval_gate() -> None:
    [violation] = routing_violations(RoutingConfig(rerun_scripts=["verify:v6 unit"]))
    assert violation.field == "routing.rerun_scripts"
    assert AGENT_BEHAVIOR_EVAL_GATE in violation.description


def test_every_class_needs_a_model_id_a_rate_and_a_price() -> None:
    extra = ModelCandidate(
        model_class="tiny-class", size_rank=0, quality_bp={"narrative-summary-continuity": 10}
    )
    config = GatewayConfig(routing=RoutingConfig(candidates=[*RoutingConfig().candidates, extra]))
    fields = {v.field for v in config_violations(config)}
    assert fields == {
        "routing.model_ids.tiny-class",
        "cost.class_rates_per_1k.tiny-class",
        "cost.prices.tiny-class",
    }


def test_the_fingerprint_is_stable_and_changes_with_the_routing() -> None:
    assert config_fingerprint(GatewayConfig()) == config_fingerprint(GatewayConfig())
    moved = GatewayConfig(routing=RoutingConfig(rerun_scripts=[AGENT_BEHAVIOR_EVAL_GATE, "verify:v6 smoke"]))
    assert config_fingerprint(moved) != config_fingerprint(GatewayConfig())


def test_an_unknown_tier_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as refused:
        select_route(RoutingConfig(), 0)
    assert refused.value.violations[0].field == "tier"
