"""Smallest-qualified routing, its governance checks, and the FNV-1a fingerprint of the canonical config."""

from __future__ import annotations

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
        concrete_model_id=routing.model_ids[candidate.model_class],
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


def config_violations(config: GatewayConfig) -> list[FieldViolation]:
    """Every reason a gateway config is refused at start."""
    violations = routing_violations(config.routing)
    for name in (c.model_class for c in config.routing.candidates):
        if name not in config.cost.class_rates_per_1k:
            violations.append(FieldViolation(f"cost.class_rates_per_1k.{name}", "missing class rate"))
        if name not in config.cost.prices:
            violations.append(FieldViolation(f"cost.prices.{name}", "missing price"))
    return violations


def validate_config(config: GatewayConfig) -> None:
    violations = config_violations(config)
    if violations:
        raise InvalidArgument(violations)
