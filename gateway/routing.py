"""Smallest-qualified routing, its governance checks, and the FNV-1a fingerprint of the canonical config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from gateway.config import AGENT_BEHAVIOR_EVAL_GATE, TIER_NAMES, GatewayConfig, ModelCandidate, RoutingConfig
from services.errors import FieldViolation, InvalidArgument, NotFound
from services.fingerprint import fingerprint

MODEL_REF_PREFIX = "anthropic:claude-"


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

    @property
    def model_ref(self) -> str:
        return model_ref(self.model_class)


def smallest_qualified(routing: RoutingConfig, tier: int) -> ModelCandidate | None:
    """The enabled candidate with the smallest size rank that clears the tier's bar, if any."""
    route = routing.route_for(tier)
    qualified = [
        c
        for c in routing.candidates
        if c.enabled and c.quality_bp.get(route.eval_suite, 0) >= route.required_quality_bp
    ]
    return min(qualified, key=lambda c: (c.size_rank, c.model_class), default=None)


def concrete_model_id(routing: RoutingConfig, model_class: str) -> str:
    """The model id a class's calls name: its first target's with a providers table, else model_ids'."""
    if routing.class_targets:
        return routing.class_targets[model_class][0].model_id
    return routing.model_ids[model_class]


def select_route(routing: RoutingConfig, tier: int) -> ModelRoute:
    """The configured route for a tier (validated at start to be the smallest qualified)."""
    if tier not in TIER_NAMES:
        raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
    route = routing.route_for(tier)
    candidate = next((c for c in routing.candidates if c.model_class == route.selected_model_class), None)
    if candidate is None:
        raise NotFound(f"no candidate named {route.selected_model_class!r}")
    best = smallest_qualified(routing, tier)
    return ModelRoute(
        tier=tier,
        model_class=candidate.model_class,
        concrete_model_id=concrete_model_id(routing, candidate.model_class),
        quality_bp=candidate.quality_bp.get(route.eval_suite, 0),
        required_quality_bp=route.required_quality_bp,
        eval_suite=route.eval_suite,
        smallest_qualified=best is not None and best.model_class == candidate.model_class,
    )


def routing_violations(routing: RoutingConfig) -> list[FieldViolation]:
    """Why a routing config may not be served: down-routes, missing gates, unknown or unqualified classes."""
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
        field = f"routing.{name}.selected_model_class"
        selected = by_class.get(route.selected_model_class)
        best = smallest_qualified(routing, tier)
        if selected is None:
            violations.append(FieldViolation(field, f"unknown model class {route.selected_model_class!r}"))
        elif best is None:
            violations.append(
                FieldViolation(field, f"no enabled candidate clears {route.required_quality_bp} bp")
            )
        elif not selected.enabled or selected.quality_bp.get(route.eval_suite, 0) < route.required_quality_bp:
            violations.append(FieldViolation(field, f"{selected.model_class} does not clear the tier's bar"))
        elif selected.size_rank > best.size_rank:
            violations.append(
                FieldViolation(
                    field, f"{selected.model_class} is larger than the smallest qualified {best.model_class}"
                )
            )
    return violations


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
