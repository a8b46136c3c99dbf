"""Smallest-qualified routing by recorded eval scores, its governance checks, and the config fingerprint."""

from __future__ import annotations

import pytest

from gateway.config import (
    AGENT_BEHAVIOR_EVAL_GATE,
    GatewayConfig,
    ModelCandidate,
    ModelTarget,
    RoutingConfig,
    TierRoute,
)
from gateway.evals.scores import EvalScore, ScoreBook
from gateway.routing import (
    RouteBook,
    class_score,
    config_fingerprint,
    config_violations,
    routing_violations,
    score_violations,
    select_route,
)
from services.errors import FailedPrecondition, InvalidArgument
from tests.gateway.harness import ATROPOS, CLOTHO, LACHESIS

DIALOGUE, REFLECTION, SUMMARY = (
    "social-judgment-live-dialogue",
    "offscreen-reflection-coherence",
    "narrative-summary-continuity",
)


def scored(provider: str, model_id: str, suite: str, bp: int, version: int = 1) -> EvalScore:
    return EvalScore(provider, model_id, suite, version, bp, 24, bp, 10_000, offline=False, recorded_at_ms=1)


# What the default routing needs: each tier's selected class (Anthropic, no providers table) over its bar.
PASSING = ScoreBook(
    [
        scored("anthropic", "claude-opus-4-7", DIALOGUE, 9_700),
        scored("anthropic", "claude-sonnet-4-6", REFLECTION, 9_400),
        scored("anthropic", "claude-haiku-4-5", SUMMARY, 8_600),
    ]
)


def test_each_tier_routes_to_its_selected_class_with_its_recorded_score() -> None:
    routing = RoutingConfig()
    routes = {tier: select_route(routing, tier, PASSING) for tier in (CLOTHO, LACHESIS, ATROPOS)}
    assert {t: (r.model_class, r.quality_bp) for t, r in routes.items()} == {
        CLOTHO: ("opus-class", 9_700),
        LACHESIS: ("sonnet-class", 9_400),
        ATROPOS: ("haiku-class", 8_600),
    }
    assert all(r.smallest_qualified and r.evaluated for r in routes.values())
    assert [r.required_quality_bp for r in routes.values()] == [9_500, 9_000, 8_000]
    assert routes[LACHESIS].model_ref == "anthropic:claude-sonnet-class-latest"
    assert routes[LACHESIS].concrete_model_id == routing.model_ids["sonnet-class"]
    assert routing_violations(routing) == []
    assert score_violations(routing, PASSING) == {}


def test_a_class_without_a_recorded_score_is_not_qualified_and_names_the_command() -> None:
    unscored = ScoreBook([s for s in [PASSING.recorded("anthropic", "claude-haiku-4-5", SUMMARY)] if s])
    violations = score_violations(RoutingConfig(), unscored)
    assert set(violations) == {CLOTHO, LACHESIS}
    assert violations[CLOTHO].field == "routing.clotho.selected_model_class"
    assert violations[CLOTHO].description == (
        f"opus-class has no recorded score on {DIALOGUE};"
        f" run `egbe eval --suite {DIALOGUE} --class opus-class`"
    )
    route = select_route(RoutingConfig(), CLOTHO, unscored)
    assert (route.quality_bp, route.smallest_qualified) == (0, False)


def test_a_score_below_the_bar_or_of_another_suite_version_does_not_qualify() -> None:
    low = ScoreBook([scored("anthropic", "claude-haiku-4-5", SUMMARY, 7_999)])
    assert "scored 7999 bp on narrative-summary-continuity, below the tier's 8000 bp" in (
        score_violations(RoutingConfig(), low)[ATROPOS].description
    )
    stale = ScoreBook([scored("anthropic", "claude-haiku-4-5", SUMMARY, 9_000, version=0)])
    assert class_score(RoutingConfig(), stale, "haiku-class", SUMMARY) is None


def test_a_class_scores_the_lowest_of_its_targets_and_every_target_needs_one() -> None:
    routing = RoutingConfig(
        class_targets={
            "haiku-class": [
                ModelTarget(provider="vllm", model_id="qwen"),
                ModelTarget(provider="claude", model_id="h"),
            ]
        }
    )
    both = ScoreBook([scored("vllm", "qwen", SUMMARY, 9_100), scored("claude", "h", SUMMARY, 8_200)])
    assert class_score(routing, both, "haiku-class", SUMMARY) == 8_200
    only_first = ScoreBook([scored("vllm", "qwen", SUMMARY, 9_100)])
    assert class_score(routing, only_first, "haiku-class", SUMMARY) is None


def test_a_larger_than_smallest_qualified_selection_is_rejected() -> None:
    routing = RoutingConfig().model_copy(
        update={
            "atropos": TierRoute(
                eval_suite=SUMMARY, required_quality_bp=8_000, selected_model_class="opus-class"
            )
        }
    )
    scores = ScoreBook([*(PASSING.recorded("anthropic", m, s) for m, s in [("claude-haiku-4-5", SUMMARY)]),
                        scored("anthropic", "claude-opus-4-7", SUMMARY, 9_500),
                        scored("anthropic", "claude-opus-4-7", DIALOGUE, 9_700),
                        scored("anthropic", "claude-sonnet-4-6", REFLECTION, 9_400)])  # fmt: skip
    violations = score_violations(routing, scores)
    assert list(violations) == [ATROPOS]
    assert violations[ATROPOS].description == "opus-class is larger than the smallest qualified haiku-class"


def test_a_disabled_selected_class_is_refused_whatever_its_score() -> None:
    candidates = [
        c.model_copy(update={"enabled": c.model_class != "haiku-class"}) for c in RoutingConfig().candidates
    ]
    [violation] = routing_violations(RoutingConfig(candidates=candidates))
    assert (violation.field, violation.description) == (
        "routing.atropos.selected_model_class",
        "haiku-class is disabled",
    )


def test_an_unknown_eval_suite_is_named() -> None:
    routing = RoutingConfig(
        lachesis=TierRoute(eval_suite="vibes", required_quality_bp=9_000, selected_model_class="sonnet-class")
    )
    [violation] = routing_violations(routing)
    assert violation.field == "routing.lachesis.eval_suite"


def test_the_route_book_refuses_an_unqualified_tier_until_its_score_is_recorded() -> None:
    book = RouteBook(RoutingConfig(), evaluated=True)
    with pytest.raises(FailedPrecondition) as refused:
        book.route(CLOTHO)
    assert refused.value.violations[0].field == "routing.clotho.selected_model_class"
    assert book.replace(PASSING) == []
    assert book.route(CLOTHO).quality_bp == 9_700


def test_with_the_offline_adapter_no_score_applies() -> None:
    book = RouteBook(RoutingConfig(), evaluated=False)
    route = book.route(LACHESIS)  # no score recorded, and no refusal
    assert (route.evaluated, route.quality_bp, route.smallest_qualified) == (False, 0, False)
    assert route.note == "not evaluated: the offline adapter answers, and it is no model"


def test_re_run_scripts_must_carry_the_agent_behaviour_eval_gate() -> None:
    [violation] = routing_violations(RoutingConfig(rerun_scripts=["verify:v6 unit"]))
    assert violation.field == "routing.rerun_scripts"
    assert AGENT_BEHAVIOR_EVAL_GATE in violation.description


def test_every_class_needs_a_model_id_a_rate_and_a_price() -> None:
    extra = ModelCandidate(model_class="tiny-class", size_rank=0)
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
        select_route(RoutingConfig(), 0, PASSING)
    assert refused.value.violations[0].field == "tier"
