"""CognitionService over gRPC: validate the run, run the pipeline, count validation fallbacks; and the
social layer's RPCs (cognition_service/social/wire.py converts and validates them)."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from cognition_service.config import CognitionConfig
from cognition_service.errors import answers_in_status
from cognition_service.peers import Peers
from cognition_service.pipeline import MODE_NAMES, think
from cognition_service.social import wire as social_wire
from cognition_service.social.layer import SocialLayer
from egbe.v1 import cognition_pb2, cognition_pb2_grpc, policy_pb2
from services.auth import Role, require_scope
from services.deadlines import serving
from services.errors import FieldViolation, InvalidArgument
from services.grpc_types import Context
from services.logging import bind_context, get_logger
from services.metrics import Counters, Histograms
from services.protocol_limits import (
    GROUND_CLAIM_CHARS,
    GROUND_CLAIMS,
    GROUND_EVIDENCE,
    GROUND_EVIDENCE_CHARS,
    GROUND_ID_CHARS,
    GROUND_LOCALE_CHARS,
    GROUND_TAG_CHARS,
    GROUND_TAGS,
    STORED_INTEGER_MAX,
)
from services.vocabulary import TIER_NAMES

log = get_logger(__name__)

METHOD_ROLES = {
    cognition_pb2.DESCRIPTOR.services_by_name["CognitionService"].full_name: {
        "Think": frozenset({Role.SERVICE}),
        # The world server (and services acting for it) bring steward acts and sessions to the social layer.
        "NegotiateObjective": frozenset({Role.WORLD, Role.SERVICE}),
        "ObserveStewardExample": frozenset({Role.WORLD, Role.SERVICE}),
        "AdvanceGoalArc": frozenset({Role.WORLD, Role.SERVICE}),
        "ResolveCrossroads": frozenset({Role.WORLD, Role.SERVICE}),
        "AdvanceLifeArc": frozenset({Role.WORLD, Role.SERVICE}),
        "SeedRelationship": frozenset({Role.WORLD, Role.SERVICE}),
    }
}
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:_./#-]{0,127}$")
# Longest run id and context item ref. The peers' limits (services.protocol_limits) are checked before
# any call, so a value a peer would refuse is refused here, whole; Ground's evidence is the request's
# world facts plus the memories and perception the context keeps.
ID_CHARS = 128


def validate_think(request: cognition_pb2.ThinkRequest, config: CognitionConfig) -> None:
    """Every field the pipeline relies on, checked at once; INVALID_ARGUMENT names each bad field."""
    violations: list[FieldViolation] = []
    if not request.run_id:
        violations.append(FieldViolation("run_id", "required"))
    elif len(request.run_id) > ID_CHARS:
        violations.append(FieldViolation("run_id", f"at most {ID_CHARS} characters"))
    if request.world_tick > STORED_INTEGER_MAX:
        violations.append(FieldViolation("world_tick", f"must be at most {STORED_INTEGER_MAX}"))
    if not IDENTIFIER.match(request.ori.ori_id):
        violations.append(FieldViolation("ori.ori_id", "required: letters, digits and :_./#- up to 128"))
    if request.tier not in TIER_NAMES:
        violations.append(FieldViolation("tier", "must be clotho, lachesis or atropos"))
    if request.mode not in MODE_NAMES:
        violations.append(FieldViolation("mode", "must be dialogue, decision, reflection or summary"))
    if request.locale and request.locale not in config.locales:
        violations.append(FieldViolation("locale", f"must be one of {list(config.locales)}"))
    if request.counterpart_id and not IDENTIFIER.match(request.counterpart_id):
        violations.append(FieldViolation("counterpart_id", "letters, digits and :_./#- up to 128"))
    violations += _context_violations(request)
    violations += _ground_violations(request, config)
    if violations:
        raise InvalidArgument(violations)


def _context_violations(request: cognition_pb2.ThinkRequest) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    for section in ("perception", "traits", "quirks", "objectives"):
        for i, item in enumerate(getattr(request, section)):
            if not item.ref:
                violations.append(FieldViolation(f"{section}[{i}].ref", "required"))
            elif len(item.ref) > ID_CHARS:
                violations.append(FieldViolation(f"{section}[{i}].ref", f"at most {ID_CHARS} characters"))
            if item.priority_bp > 10_000:
                violations.append(FieldViolation(f"{section}[{i}].priority_bp", "must be 0..10000"))
    for i, claim in enumerate(request.claims):
        if not claim.claim_id:
            violations.append(FieldViolation(f"claims[{i}].claim_id", "required"))
        if claim.kind == policy_pb2.CLAIM_KIND_UNSPECIFIED:
            violations.append(FieldViolation(f"claims[{i}].kind", "must be fact, opinion or backstory"))
    for i, fact in enumerate(request.world_facts):
        if not fact.evidence_id:
            violations.append(FieldViolation(f"world_facts[{i}].evidence_id", "required"))
    return violations


def _sized(value: str, field: str, limit: int) -> list[FieldViolation]:
    return [FieldViolation(field, f"at most {limit} characters")] if len(value) > limit else []


def _counted(count: int, field: str, limit: int) -> list[FieldViolation]:
    return [FieldViolation(field, f"holds {count}; the limit is {limit}")] if count > limit else []


def _tags(tags: Sequence[str], field: str) -> list[FieldViolation]:
    violations = _counted(len(tags), field, GROUND_TAGS)
    for i, tag in enumerate(tags[:GROUND_TAGS]):
        violations += _sized(tag, f"{field}[{i}]", GROUND_TAG_CHARS)
    return violations


def _ground_violations(request: cognition_pb2.ThinkRequest, config: CognitionConfig) -> list[FieldViolation]:
    """Claims and world facts within what the policy's Ground takes (leaving room for the memories
    and perception the context keeps)."""
    facts_limit = GROUND_EVIDENCE - config.limits.memories - config.limits.perception
    violations = _counted(len(request.claims), "claims", GROUND_CLAIMS)
    violations += _counted(len(request.world_facts), "world_facts", facts_limit)
    for i, claim in enumerate(request.claims[:GROUND_CLAIMS]):
        violations += _sized(claim.claim_id, f"claims[{i}].claim_id", GROUND_ID_CHARS)
        violations += _sized(claim.text, f"claims[{i}].text", GROUND_CLAIM_CHARS)
        violations += _sized(claim.locale, f"claims[{i}].locale", GROUND_LOCALE_CHARS)
        violations += _tags(claim.required_tags, f"claims[{i}].required_tags")
    for i, fact in enumerate(request.world_facts[:facts_limit]):
        violations += _sized(fact.evidence_id, f"world_facts[{i}].evidence_id", GROUND_ID_CHARS)
        violations += _sized(fact.text, f"world_facts[{i}].text", GROUND_EVIDENCE_CHARS)
        violations += _tags(fact.tags, f"world_facts[{i}].tags")
    return violations


Servicer = TypeVar("Servicer")
Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response")


STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0)
# The Ori a request acts for, by field: a scoped world token may act only for its tenants and worlds.
ORI_FIELDS = ("ori", "counterpart")


def _in_scope(request: Message) -> None:
    fields = request.DESCRIPTOR.fields_by_name
    for name in ORI_FIELDS:
        if name in fields and request.HasField(name):
            ori = getattr(request, name)
            require_scope(tenant=ori.tenant_id, world=ori.world_id, at=name)


def served(
    method: Callable[[Servicer, Request, Context], Awaitable[Response]],
) -> Callable[[Servicer, Request, Context], Awaitable[Response]]:
    """An RPC method whose peer calls end by its caller's deadline (less the margin to answer in)
    and whose CognitionErrors reach the caller as their mapped status."""
    answering = answers_in_status(method)

    @functools.wraps(method)
    async def answer(servicer: Servicer, request: Request, context: Context) -> Response:
        _in_scope(request)
        with serving(context):
            return await answering(servicer, request, context)

    return answer


class CognitionServicer(cognition_pb2_grpc.CognitionServiceServicer):
    def __init__(
        self, config: CognitionConfig, peers: Callable[[], Peers], social: Callable[[], SocialLayer]
    ) -> None:
        self._config = config
        self._peers = peers
        self._social = social
        self.validation_fallbacks_total = 0
        # Scraped on cognition's metrics endpoint.
        self.stage_seconds = Histograms(
            "egbe_cognition_stage_seconds",
            "Time in each stage of a Think, model calls included",
            ("stage",),
            STAGE_BUCKETS,
        )
        self.outcomes = Counters(
            {
                "egbe_cognition_thinks": ("Thinks answered, by mode and how they ended", ("mode", "outcome")),
                "egbe_cognition_validation_fallbacks": (
                    "Replies refused by their schema, by mode",
                    ("mode",),
                ),
            }
        )

    @served
    async def Think(
        self, request: cognition_pb2.ThinkRequest, context: Context
    ) -> cognition_pb2.ThinkResponse:
        validate_think(request, self._config)
        ori = request.ori
        bind_context(world=ori.world_id, ori=ori.ori_id, run=request.run_id, tick=request.world_tick)
        response = await think(request, self._peers(), self._config)
        self._observe(MODE_NAMES.get(request.mode, "unknown"), response)
        if response.validation_fallbacks:
            self.validation_fallbacks_total += response.validation_fallbacks
            log.warning(
                "validation_fallback",
                run_id=request.run_id,
                ori_id=request.ori.ori_id,
                total=self.validation_fallbacks_total,
            )
        return response

    def _observe(self, mode: str, response: cognition_pb2.ThinkResponse) -> None:
        trace = response.audit.fields["eval_trace"].struct_value.fields
        for stage, micros in trace["stages_us"].struct_value.fields.items():
            self.stage_seconds.observe(micros.number_value / 1e6, stage)
        self.outcomes.add("egbe_cognition_thinks", mode, response.audit.fields["outcome"].string_value)
        if response.validation_fallbacks:
            self.outcomes.add(
                "egbe_cognition_validation_fallbacks", mode, amount=response.validation_fallbacks
            )

    # --- the social layer: validate whole, decide, write the events, answer ------------------------

    @served
    async def NegotiateObjective(
        self, request: cognition_pb2.NegotiateObjectiveRequest, context: Context
    ) -> cognition_pb2.NegotiateObjectiveResponse:
        ori, objective, tick = social_wire.negotiate_request(request)
        return social_wire.negotiate_response(await self._social().assign_objective(ori, objective, tick))

    @served
    async def ObserveStewardExample(
        self, request: cognition_pb2.ObserveStewardExampleRequest, context: Context
    ) -> cognition_pb2.ObserveStewardExampleResponse:
        ori_id, values, demonstration, tick = social_wire.observe_request(request)
        learned = await self._social().learn_from_demonstration(ori_id, values, demonstration, tick)
        return social_wire.observe_response(learned)

    @served
    async def AdvanceGoalArc(
        self, request: cognition_pb2.AdvanceGoalArcRequest, context: Context
    ) -> cognition_pb2.AdvanceGoalArcResponse:
        arc, session = social_wire.advance_request(request)
        return social_wire.advance_response(await self._social().advance_goal_arc(arc, session))

    @served
    async def ResolveCrossroads(
        self, request: cognition_pb2.ResolveCrossroadsRequest, context: Context
    ) -> cognition_pb2.ResolveCrossroadsResponse:
        ori_id, values, crossroads, bond, counsel, now = social_wire.crossroads_request(request)
        resolved = await self._social().resolve_crossroads(
            ori_id, values, crossroads, bond=bond, counsel=counsel, now_tick=now
        )
        return social_wire.crossroads_response(resolved)

    @served
    async def AdvanceLifeArc(
        self, request: cognition_pb2.AdvanceLifeArcRequest, context: Context
    ) -> cognition_pb2.AdvanceLifeArcResponse:
        arc, values, session = social_wire.life_arc_request(request)
        return social_wire.life_arc_response(await self._social().advance_life_arc(arc, values, session))

    @served
    async def SeedRelationship(
        self, request: cognition_pb2.SeedRelationshipRequest, context: Context
    ) -> cognition_pb2.SeedRelationshipResponse:
        seed = social_wire.seed_request(request)
        return social_wire.seed_response(await self._social().seed_relationship(seed))
