"""RegisterIdentities on the wire: the whole request validated (field-named violations), then answered.

Every string of an identity is untrusted prompt content: bounded in length, free of control characters
other than newline and tab, and the closed vocabularies (personality axes, value domains) are checked.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from google.protobuf import json_format

from biography_service.config import BiographyConfig
from biography_service.events import canonical_json
from biography_service.identity import IdentityRecorded, Registration
from biography_service.wire import Violations, ori_id_problems
from egbe.v1 import biography_pb2
from services.protocol_limits import STORED_INTEGER_MAX
from services.vocabulary import PERSONALITY_AXES, VALUE_DOMAINS_BY_NAME

MAX_REGISTRATIONS = 100_000
BASIS_POINTS_MAX = 10_000
NAME_CHARS = 128  # display_name, vocation, home, and a relationship's other_name
RELATIONSHIP_KIND_CHARS = 32
PERSONA_CHARS = 2_000
MAX_QUIRKS = 8
QUIRK_CHARS = 240
MAX_RELATIONSHIPS = 32
LOCALE_CHARS = 35
NEEDS = tuple(field.name for field in biography_pb2.NeedsBaseline.DESCRIPTOR.fields)
# C0 and C1 controls and DEL, except tab and newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A plausible BCP-47 tag: language, then optional script, region, variants, extensions, private use.
_LOCALE = re.compile(
    r"[A-Za-z]{2,3}(-[A-Za-z]{4})?(-([A-Za-z]{2}|[0-9]{3}))?(-([A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3}))*"
    r"(-[A-WYZa-wyz0-9](-[A-Za-z0-9]{2,8})+)*(-[Xx](-[A-Za-z0-9]{1,8})+)?"
)


def register_identities_request(
    request: biography_pb2.RegisterIdentitiesRequest, config: BiographyConfig
) -> list[Registration]:
    problems = Violations()
    count = len(request.registrations)
    if count > MAX_REGISTRATIONS:
        problems.add("registrations", f"holds {count}; the limit is {MAX_REGISTRATIONS}")
    seen: set[str] = set()
    registrations: list[Registration] = []
    for i, registration in enumerate(request.registrations[:MAX_REGISTRATIONS]):
        field = f"registrations[{i}]"
        ori_id_problems(registration.ori_id, f"{field}.ori_id", config, problems)
        if registration.ori_id in seen:
            problems.add(f"{field}.ori_id", "repeats an Ori registered earlier in this request")
        seen.add(registration.ori_id)
        if registration.world_tick > STORED_INTEGER_MAX:
            problems.add(f"{field}.world_tick", f"must be at most {STORED_INTEGER_MAX}")
        if not registration.HasField("identity"):
            problems.add(f"{field}.identity", "is required")
            continue
        before = len(problems.found)
        _identity(registration.identity, f"{field}.identity", config, problems)
        if len(problems.found) == before:
            identity = json_format.MessageToDict(registration.identity, preserving_proto_field_name=True)
            registrations.append(
                Registration(registration.ori_id, identity, canonical_json(identity), registration.world_tick)
            )
    problems.raise_if_any()
    return registrations


def _identity(
    identity: biography_pb2.OriIdentity, field: str, config: BiographyConfig, problems: Violations
) -> None:
    if not identity.display_name.strip():
        problems.add(f"{field}.display_name", "is required")
    for name in ("display_name", "vocation", "home"):
        _text(getattr(identity, name), f"{field}.{name}", NAME_CHARS, problems)
    _text(identity.persona, f"{field}.persona", PERSONA_CHARS, problems)
    if identity.locale and (len(identity.locale) > LOCALE_CHARS or not _LOCALE.fullmatch(identity.locale)):
        problems.add(f"{field}.locale", f"must be a BCP-47 tag (en-US, yo-NG), at most {LOCALE_CHARS} long")
    traits = [(t.axis, t.level_bp) for t in identity.personality]
    keys = ("axis", "level_bp")
    _ranked(traits, f"{field}.personality", keys, problems, vocabulary=PERSONALITY_AXES, noun="axis")
    values = [(v.value_ref, v.weight_bp) for v in identity.values]
    keys = ("value_ref", "weight_bp")
    _ranked(values, f"{field}.values", keys, problems, vocabulary=VALUE_DOMAINS_BY_NAME, noun="value")
    if len(identity.quirks) > MAX_QUIRKS:
        problems.add(f"{field}.quirks", f"holds {len(identity.quirks)}; the limit is {MAX_QUIRKS}")
    for i, quirk in enumerate(identity.quirks):
        if not quirk.strip():
            problems.add(f"{field}.quirks[{i}]", "must not be blank")
        _text(quirk, f"{field}.quirks[{i}]", QUIRK_CHARS, problems)
    for need in NEEDS:
        _basis_points(getattr(identity.needs, need), f"{field}.needs.{need}", problems)
    _relationships(identity, field, config, problems)


def _text(value: str, field: str, limit: int, problems: Violations) -> None:
    if len(value) > limit:
        problems.add(field, f"is {len(value)} characters; the limit is {limit}")
    if _CONTROL.search(value):
        problems.add(field, "must not contain control characters (newline and tab are allowed)")


def _basis_points(value: int, field: str, problems: Violations) -> None:
    if value > BASIS_POINTS_MAX:
        problems.add(field, f"must be in [0, {BASIS_POINTS_MAX}]")


def _ranked(
    levels: Sequence[tuple[str, int]],
    field: str,
    keys: tuple[str, str],
    problems: Violations,
    *,
    vocabulary: Collection[str],
    noun: str,
) -> None:
    """Personality traits and values alike: each names a word of its closed vocabulary, at most once,
    with a level in basis points; `keys` are the message's name and level fields."""
    name_key, level_key = keys
    seen: set[str] = set()
    for i, (name, level) in enumerate(levels):
        if name not in vocabulary:
            problems.add(f"{field}[{i}].{name_key}", f"must be one of {sorted(vocabulary)}")
        elif name in seen:
            problems.add(f"{field}[{i}].{name_key}", f"repeats the {noun} {name!r}")
        seen.add(name)
        _basis_points(level, f"{field}[{i}].{level_key}", problems)


def _relationships(
    identity: biography_pb2.OriIdentity, field: str, config: BiographyConfig, problems: Violations
) -> None:
    count = len(identity.relationships)
    if count > MAX_RELATIONSHIPS:
        problems.add(f"{field}.relationships", f"holds {count}; the limit is {MAX_RELATIONSHIPS}")
    others: set[str] = set()
    for i, relationship in enumerate(identity.relationships):
        at = f"{field}.relationships[{i}]"
        ori_id_problems(relationship.other_ori_id, f"{at}.other_ori_id", config, problems)
        if relationship.other_ori_id in others:
            problems.add(f"{at}.other_ori_id", "repeats an Ori related earlier")
        others.add(relationship.other_ori_id)
        _text(relationship.other_name, f"{at}.other_name", NAME_CHARS, problems)
        if not relationship.kind.strip():
            problems.add(f"{at}.kind", "is required (kin, friend, rival, mentor, apprentice, neighbour, ...)")
        _text(relationship.kind, f"{at}.kind", RELATIONSHIP_KIND_CHARS, problems)
        if not -BASIS_POINTS_MAX <= relationship.affinity_bp <= BASIS_POINTS_MAX:
            problems.add(f"{at}.affinity_bp", f"must be in [{-BASIS_POINTS_MAX}, {BASIS_POINTS_MAX}]")


def register_identities_response(
    recorded: list[IdentityRecorded],
) -> biography_pb2.RegisterIdentitiesResponse:
    return biography_pb2.RegisterIdentitiesResponse(
        recorded=[
            biography_pb2.IdentityRecorded(
                ori_id=r.ori_id,
                identity_version=r.identity_version,
                outcome=r.outcome.value,
                stream_version=r.stream_version,
            )
            for r in recorded
        ]
    )
