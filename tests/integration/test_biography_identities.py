"""RegisterIdentities and the identity in Rehydrate over real gRPC, on both backends: outcomes, refusals
that name the field and write nothing, the roles admitted, and the solo ceiling's Ori in one call."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from grpc_status import rpc_status

from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.biography.identities_for_tests import identity, registration_message
from tests.integration.conftest import SERVICE_TOKEN, WORLD_TOKEN

AUTH = bearer_metadata(SERVICE_TOKEN)
Registrations = list[biography_pb2.IdentityRegistration]


def _request(*registrations: biography_pb2.IdentityRegistration) -> biography_pb2.RegisterIdentitiesRequest:
    return biography_pb2.RegisterIdentitiesRequest(registrations=list(registrations))


async def test_register_unchanged_changed_and_rehydrated(
    stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    first = await stub.RegisterIdentities(
        _request(registration_message("ori-1"), registration_message("ori-2", identity("Tobi"))),
        metadata=AUTH,
    )
    assert [(r.ori_id, r.identity_version, r.outcome, r.stream_version) for r in first.recorded] == [
        ("ori-1", 1, "registered", 0),
        ("ori-2", 1, "registered", 0),
    ]
    again = await stub.RegisterIdentities(_request(registration_message("ori-1")), metadata=AUTH)
    assert [(r.identity_version, r.outcome, r.stream_version) for r in again.recorded] == [
        (1, "unchanged", 0)
    ]
    changed = identity(persona="I left the forge to ring bells.")
    # A world may register its Ori directly.
    world = bearer_metadata(WORLD_TOKEN)
    third = await stub.RegisterIdentities(_request(registration_message("ori-1", changed)), metadata=world)
    assert [(r.identity_version, r.outcome, r.stream_version) for r in third.recorded] == [(2, "changed", 1)]
    log = await stub.Read(biography_pb2.ReadRequest(ori_id="$all"), metadata=AUTH)
    assert [(e.ori_id, e.kind) for e in log.events] == [
        ("ori-1", biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED),
        ("ori-2", biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED),
        ("ori-1", biography_pb2.ORI_EVENT_KIND_IDENTITY_CHANGED),
    ]
    assert log.events[2].payload["identity_version"] == 2
    assert log.events[2].payload["persona"] == "I left the forge to ring bells."
    context = await stub.Rehydrate(
        biography_pb2.RehydrateRequest(ori_id="ori-1", max_events=1), metadata=AUTH
    )
    assert context.identity == changed
    assert context.identity_version == 2
    assert [(v.value_ref, v.weight_bp) for v in context.values] == [("craft", 9000)]
    assert dict(context.omitted) == {"values": 1}
    never = await stub.Rehydrate(biography_pb2.RehydrateRequest(ori_id="ori-3"), metadata=AUTH)
    assert not never.HasField("identity")
    assert never.identity_version == 0


def _four_with_a_bad_relationship_kind() -> Registrations:
    bad = identity(
        relationships=[
            biography_pb2.IdentityRelationship(other_ori_id="ori-a", kind="kin"),
            biography_pb2.IdentityRelationship(other_ori_id="ori-b", kind="k" * 33),
        ]
    )
    return [*(registration_message(f"ori-{i}") for i in range(3)), registration_message("ori-3", bad)]


def _with(**fields: object) -> Registrations:
    return [registration_message("ori-0"), registration_message("ori-1", identity(**fields))]


TRAIT = biography_pb2.TraitLevel
VALUE = biography_pb2.ValueItem
RELATION = biography_pb2.IdentityRelationship
REFUSALS: list[tuple[Callable[[], Registrations], str]] = [
    (_four_with_a_bad_relationship_kind, "registrations[3].identity.relationships[1].kind"),
    (lambda: [registration_message("ori-0"), registration_message("ori-0")], "registrations[1].ori_id"),
    (lambda: [registration_message("$all")], "registrations[0].ori_id"),
    (lambda: [biography_pb2.IdentityRegistration(ori_id="ori-0")], "registrations[0].identity"),
    (lambda: _with(display_name=" "), "registrations[1].identity.display_name"),
    (lambda: _with(display_name="n" * 129), "registrations[1].identity.display_name"),
    (lambda: _with(vocation="v" * 129), "registrations[1].identity.vocation"),
    (lambda: _with(home="h\x1b[2J"), "registrations[1].identity.home"),
    (lambda: _with(persona="p" * 2001), "registrations[1].identity.persona"),
    (lambda: _with(persona="a\x00b"), "registrations[1].identity.persona"),
    (lambda: _with(locale="english please"), "registrations[1].identity.locale"),
    (lambda: _with(personality=[TRAIT(axis="grit")]), "registrations[1].identity.personality[0].axis"),
    (
        lambda: _with(personality=[TRAIT(axis="candor"), TRAIT(axis="candor")]),
        "registrations[1].identity.personality[1].axis",
    ),
    (
        lambda: _with(personality=[TRAIT(axis="candor", level_bp=1), TRAIT(axis="warmth", level_bp=10_001)]),
        "registrations[1].identity.personality[1].level_bp",
    ),
    (
        lambda: _with(values=[VALUE(value_ref="value:loyalty")]),
        "registrations[1].identity.values[0].value_ref",
    ),
    (
        lambda: _with(values=[VALUE(value_ref="joy"), VALUE(value_ref="joy")]),
        "registrations[1].identity.values[1].value_ref",
    ),
    (
        lambda: _with(values=[VALUE(value_ref="joy", weight_bp=10_001)]),
        "registrations[1].identity.values[0].weight_bp",
    ),
    (lambda: _with(quirks=["q"] * 9), "registrations[1].identity.quirks"),
    (lambda: _with(quirks=["ok", "q" * 241]), "registrations[1].identity.quirks[1]"),
    (
        lambda: _with(needs=biography_pb2.NeedsBaseline(fatigue_bp=10_001)),
        "registrations[1].identity.needs.fatigue_bp",
    ),
    (
        lambda: _with(relationships=[RELATION(other_ori_id=f"o-{i}", kind="kin") for i in range(33)]),
        "registrations[1].identity.relationships",
    ),
    (
        lambda: _with(relationships=[RELATION(other_ori_id="o", kind="kin", affinity_bp=-10_001)]),
        "registrations[1].identity.relationships[0].affinity_bp",
    ),
    (
        lambda: _with(relationships=[RELATION(other_ori_id="", kind="kin")]),
        "registrations[1].identity.relationships[0].other_ori_id",
    ),
]


@pytest.mark.parametrize(("build", "field"), REFUSALS, ids=[field for _, field in REFUSALS])
async def test_a_bad_registration_is_refused_naming_the_field_and_nothing_is_written(
    stub: biography_pb2_grpc.BiographyServiceStub, build: Callable[[], Registrations], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RegisterIdentities(_request(*build()), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert [v.field for v in field_violations(status)] == [field]
    everything = await stub.Read(biography_pb2.ReadRequest(ori_id="$all"), metadata=AUTH)
    assert list(everything.events) == []


async def test_identity_events_are_recorded_by_register_identities_alone(
    sqlite_stub: biography_pb2_grpc.BiographyServiceStub,
) -> None:
    forged = biography_pb2.NewOriEvent(
        event_id="00000000-0000-4000-8000-000000000001", kind=biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED
    )
    forged.payload.update({"display_name": "Impostor"})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sqlite_stub.Append(biography_pb2.AppendRequest(ori_id="ori-1", events=[forged]), metadata=AUTH)
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert [(v.field, v.description) for v in field_violations(status)] == [
        ("events[0].kind", "identity events are recorded by RegisterIdentities")
    ]


async def test_the_solo_ceiling_registers_over_grpc(
    stub: biography_pb2_grpc.BiographyServiceStub, request: pytest.FixtureRequest
) -> None:
    count = 1_424
    registrations = [registration_message(f"ori-{i:04d}", identity(f"Ori {i}")) for i in range(count)]
    started = time.perf_counter()
    answer = await stub.RegisterIdentities(_request(*registrations), metadata=AUTH)
    elapsed_ms = (time.perf_counter() - started) * 1000
    backend = request.node.callspec.params["stub"]
    print(f"\n{backend}: RegisterIdentities of {count} Ori over gRPC in {elapsed_ms:.0f} ms")
    assert [r.outcome for r in answer.recorded] == ["registered"] * count
    assert [r.ori_id for r in answer.recorded] == [r.ori_id for r in registrations]
