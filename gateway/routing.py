"""Smallest-qualified routing by recorded eval scores, its governance checks, and the FNV-1a fingerprint
of the canonical config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from gateway.config import (
    AGENT_BEHAVIOR_EVAL_GATE,
    TIER_NAMES,
    GatewayConfig,
    ModelCandidate,
    ModelTarget,
    RoutingConfig,
)
from gateway.evals.scores import ScoreBook
from gateway.evals.suite import SUITE_NAMES, shipped_version
from services.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from services.fingerprint import fingerprint

MODEL_REF_PREFIX = "anthropic:claude-"
# The provider name under which scores of the Anthropic adapter (no providers table) are recorded.
ANTHROPIC_PROVIDER = "anthropic"


def config_fingerprint(config: BaseModel) -> str:
    """Fingerprint of the canonical JSON form (sorted keys, no whitespace) of a config model."""
    return fingerprint(config.model_dump(mode="json"))


def model_ref(model_class: str) -> str:
    """The class alias the kernel and the audit log name, e.g. 'anthropic:claude-sonnet-class-latest'."""
    return f"{MODEL_REF_PREFIX}{model_class.removesuffix('-class')}-class-latest"


@dataclass(frozen=True)
class ModelRoute:
    tier: int
    model_class: str
    concrete_model_id: str
    quality_bp: int
    required_quality_bp: int
    eval_suite: str
    smallest_qualified: bool
    # Whether recorded scores apply: not when the offline adapter answers (it is no model).
    evaluated: bool
    note: str  # how quality_bp was found, or why there is none

    @property
    def model_ref(self) -> str:
        return model_ref(self.model_class)


def route_targets(routing: RoutingConfig, model_class: str) -> list[ModelTarget]:
    """Where a class's calls go: its targets with a providers table, else Anthropic's model id for it."""
    if routing.class_targets:
        return list(routing.class_targets.get(model_class, ()))
    model_id = routing.model_ids.get(model_class)
    return [ModelTarget(provider=ANTHROPIC_PROVIDER, model_id=model_id)] if model_id else []


def class_score(routing: RoutingConfig, scores: ScoreBook, model_class: str, suite: str) -> int | None:
    """A class's score on a suite: the lowest of its route's targets' (a fallback must clear the bar
    too); None when any target has no score recorded on the shipped version of the suite."""
    found = [scores.current(t.provider, t.model_id, suite) for t in route_targets(routing, model_class)]
    if not found or any(score is None for score in found):
        return None
    return min(score.score_bp for score in found if score is not None)


def eval_command(suite: str, model_class: str) -> str:
    """The command that records the evidence a class needs on a suite."""
    return f"egbe eval --suite {suite} --class {model_class}"


def smallest_qualified(routing: RoutingConfig, scores: ScoreBook, tier: int) -> ModelCandidate | None:
    """The enabled candidate with the smallest size rank whose recorded score clears the tier's bar."""
    route = routing.route_for(tier)
    qualified = [
        c
        for c in routing.candidates
        if c.enabled
        and (class_score(routing, scores, c.model_class, route.eval_suite) or 0) >= route.required_quality_bp
    ]
    return min(qualified, key=lambda c: (c.size_rank, c.model_class), default=None)


def concrete_model_id(routing: RoutingConfig, model_class: str) -> str:
    """The model id a class's calls name: its first target's with a providers table, else model_ids'."""
    if routing.class_targets:
        return routing.class_targets[model_class][0].model_id
    return routing.model_ids[model_class]


def select_route(routing: RoutingConfig, tier: int, scores: ScoreBook | None) -> ModelRoute:
    """The configured route for a tier, with its recorded score; `scores` None: the offline adapter
    answers, and no score applies."""
    if tier not in TIER_NAMES:
        raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
    route = routing.route_for(tier)
    candidate = next((c for c in routing.candidates if c.model_class == route.selected_model_class), None)
    if candidate is None:
        raise NotFound(f"no candidate named {route.selected_model_class!r}")
    quality, best = None, None
    if scores is None:
        note = "not evaluated: the offline adapter answers, and it is no model"
    else:
        quality = class_score(routing, scores, candidate.model_class, route.eval_suite)
        best = smallest_qualified(routing, scores, tier)
        command = eval_command(route.eval_suite, candidate.model_class)
        note = (
            f"no recorded score on {route.eval_suite}: run `{command}`"
            if quality is None
            else f"recorded: the lowest score of the class's targets on {route.eval_suite}"
        )
    return ModelRoute(
        tier=tier,
        model_class=candidate.model_class,
        concrete_model_id=concrete_model_id(routing, candidate.model_class),
        quality_bp=quality or 0,
        required_quality_bp=route.required_quality_bp,
        eval_suite=route.eval_suite,
        smallest_qualified=best is not None and best.model_class == candidate.model_class,
        evaluated=scores is not None,
        note=note,
    )


def routing_violations(routing: RoutingConfig) -> list[FieldViolation]:
    """Why a routing config may not be served whatever its scores: missing gates, unknown suites, unknown
    or disabled selected classes, classes without a model id."""
    violations: list[FieldViolation] = []
    by_class = {c.model_class: c for c in routing.candidates}
    if len(by_class) != len(routing.candidates):
        violations.append(FieldViolation("routing.candidates", "model_class names must be unique"))
    if AGENT_BEHAVIOR_EVAL_GATE not in routing.rerun_scripts:
        violations.append(
            FieldViolation("routing.rerun_scripts", f"must include the {AGENT_BEHAVIOR_EVAL_GATE!r} gate")
        )
    if routing.class_targets:
        violations += [
            FieldViolation(
                f"routing.class_targets.{name}", "every candidate class needs a provider and model id"
            )
            for name in by_class
            if not routing.class_targets.get(name)
        ]
    else:
        violations += [
            FieldViolation(f"routing.model_ids.{name}", "every candidate class needs a concrete model id")
            for name in by_class
            if not routing.model_ids.get(name)
        ]
    for tier, name in TIER_NAMES.items():
        route = routing.route_for(tier)
        selected = by_class.get(route.selected_model_class)
        if shipped_version(route.eval_suite) is None:
            violations.append(
                FieldViolation(
                    f"routing.{name}.eval_suite",
                    f"unknown eval suite {route.eval_suite!r}; shipped: {', '.join(SUITE_NAMES)}",
                )
            )
        field = f"routing.{name}.selected_model_class"
        if selected is None:
            violations.append(FieldViolation(field, f"unknown model class {route.selected_model_class!r}"))
        elif not selected.enabled:
            violations.append(FieldViolation(field, f"{selected.model_class} is disabled"))
    return violations


def score_violations(routing: RoutingConfig, scores: ScoreBook) -> dict[int, FieldViolation]:
    """By tier, why its selected class may not serve it under the recorded scores: no score, a score
    below the tier's bar, or a smaller enabled class that clears it too (for a routing config that
    `routing_violations` passed)."""
    violations: dict[int, FieldViolation] = {}
    for tier, name in TIER_NAMES.items():
        route = routing.route_for(tier)
        field, selected = f"routing.{name}.selected_model_class", route.selected_model_class
        command = eval_command(route.eval_suite, selected)
        score = class_score(routing, scores, selected, route.eval_suite)
        best = smallest_qualified(routing, scores, tier)
        if score is None:
            why = f"{selected} has no recorded score on {route.eval_suite}; run `{command}`"
        elif score < route.required_quality_bp:
            why = (
                f"{selected} scored {score} bp on {route.eval_suite}, below the tier's"
                f" {route.required_quality_bp} bp; select a class that clears it, or re-run `{command}`"
            )
        elif best is not None and best.model_class != selected:
            why = f"{selected} is larger than the smallest qualified {best.model_class}"
        else:
            continue
        violations[tier] = FieldViolation(field, why)
    return violations


class RouteBook:
    """Each tier's route under the scores recorded now, replaced whole when they are re-recorded. With
    the offline adapter answering, no score applies and every tier is served."""

    def __init__(self, routing: RoutingConfig, *, evaluated: bool) -> None:
        self._routing = routing
        self.evaluated = evaluated
        self.unqualified: dict[int, FieldViolation] = {}
        self._routes: dict[int, ModelRoute] = {}
        self.replace(ScoreBook())

    def replace(self, scores: ScoreBook) -> list[FieldViolation]:
        """Route by these scores from now on; what each tier that is not qualified under them violates."""
        book = scores if self.evaluated else None
        self._routes = {tier: select_route(self._routing, tier, book) for tier in TIER_NAMES}
        self.unqualified = score_violations(self._routing, scores) if self.evaluated else {}
        return list(self.unqualified.values())

    def describe(self, tier: int) -> ModelRoute:
        """The tier's route, qualified or not (INVALID_ARGUMENT for no tier)."""
        if tier not in self._routes:
            raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
        return self._routes[tier]

    def route(self, tier: int) -> ModelRoute:
        """The route a call of the tier takes; FAILED_PRECONDITION naming the field while the tier's
        selected class is not qualified by the recorded scores."""
        route = self.describe(tier)
        violation = self.unqualified.get(tier)
        if violation is not None:
            raise FailedPrecondition(f"{violation.field}: {violation.description}", violations=[violation])
        return route


def provider_violations(config: GatewayConfig, environ: Mapping[str, str]) -> list[FieldViolation]:
    """Why a providers table may not be served: a class target naming no provider or no candidate class, a
    provider without its server's URL or whose key variable is unset."""
    violations: list[FieldViolation] = []
    targets = config.routing.class_targets
    if config.providers and not targets:
        violations.append(
            FieldViolation(
                "routing.class_targets", "a providers table needs every candidate class mapped to it"
            )
        )
    known = ", ".join(sorted(config.providers)) or "none"
    classes = {c.model_class for c in config.routing.candidates}
    violations += [
        FieldViolation(f"routing.class_targets.{name}", "not a candidate class")
        for name in targets
        if name not in classes
    ]
    for name, steps in targets.items():
        violations += [
            FieldViolation(
                f"routing.class_targets.{name}[{index}].provider",
                f"unknown provider {step.provider!r} (providers: {known})",
            )
            for index, step in enumerate(steps)
            if step.provider not in config.providers
        ]
    for name, provider in config.providers.items():
        field = f"providers.{name}"
        if provider.kind == "openai-compatible" and not provider.base_url:
            violations.append(
                FieldViolation(f"{field}.base_url", "an openai-compatible provider needs its URL")
            )
        if provider.kind == "anthropic" and not provider.api_key_env:
            violations.append(
                FieldViolation(
                    f"{field}.api_key_env", "an anthropic provider needs the variable holding its key"
                )
            )
        elif provider.kind != "offline" and provider.api_key_env and not environ.get(provider.api_key_env):
            violations.append(FieldViolation(f"{field}.api_key_env", f"{provider.api_key_env} is not set"))
    return violations


def config_violations(
    config: GatewayConfig, environ: Mapping[str, str] | None = None
) -> list[FieldViolation]:
    """Every reason a gateway config is refused at start (`environ`: where provider keys are read, the
    process's environment unless given)."""
    violations = routing_violations(config.routing)
    violations += provider_violations(config, os.environ if environ is None else environ)
    for name in (c.model_class for c in config.routing.candidates):
        if name not in config.cost.class_rates_per_1k:
            violations.append(FieldViolation(f"cost.class_rates_per_1k.{name}", "missing class rate"))
        if name not in config.cost.prices:
            violations.append(FieldViolation(f"cost.prices.{name}", "missing price"))
    return violations


def validate_config(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> None:
    violations = config_violations(config, environ)
    if violations:
        raise InvalidArgument(violations)
