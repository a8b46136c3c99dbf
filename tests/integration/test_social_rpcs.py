"""The social layer's RPCs on the cognition service, over real gRPC, writing to a real biography."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from assembly.settings import load_settings
from biography_service.server import build_bundle as build_biography
from cognition_service.grpc_peers import GrpcPeers
from cognition_service.servicer import METHOD_ROLES, CognitionServicer
from cognition_service.social.rehydration import rehydrate
from cognition_service.social.values import Domain
from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    cognition_pb2,
    cognition_pb2_grpc,
    common_pb2,
    kernel_pb2,
)
from policy_service.server import build_bundle as build_policy
from services.auth import Role
from services.channels import channel_opener
from services.server import ServiceBundle
from tests.integration.inprocess_services import TOKENS, channel_to, metadata, serve_bundles, token_store

WORLD = metadata(Role.WORLD)
ORI = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-a")


@dataclass
class Social:
    cognition: cognition_pb2_grpc.CognitionServiceStub
    biography: biography_pb2_grpc.BiographyServiceStub


@asynccontextmanager
async def social_service(tmp_path: Path) -> AsyncIterator[Social]:
    settings = load_settings(data_dir=str(tmp_path))
    peers_bundles = [
        await build_biography(settings, token_store()),
        await build_policy(settings, token_store()),
    ]
    async with serve_bundles(peers_bundles, settings) as peers_served:
        peers = GrpcPeers(
            lambda: {
                "gateway": "unused:1",  # the social RPCs never call a model
                "policy": peers_served.target("policy"),
                "biography": peers_served.target("biography"),
            },
            lambda: TOKENS[Role.SERVICE],
            timeout_seconds=5,
            deadline_margin_seconds=settings.cognition.rpc_deadline_margin_seconds,
            dial=channel_opener(settings),
        )
        servicer = CognitionServicer(
            settings.cognition, peers.peers, lambda: peers.social(settings.cognition.social)
        )
        bundle = ServiceBundle(
            "cognition", [(cognition_pb2_grpc.add_CognitionServiceServicer_to_server, servicer)], METHOD_ROLES
        )
        async with (
            serve_bundles([bundle], settings) as served,
            channel_to(served.target("cognition")) as channel,
            channel_to(peers_served.target("biography")) as biography_channel,
        ):
            yield Social(
                cognition_pb2_grpc.CognitionServiceStub(channel),
                biography_pb2_grpc.BiographyServiceStub(biography_channel),
            )
        await peers.close()


def value(domain: Domain, priority: int) -> cognition_pb2.SocialValue:
    return cognition_pb2.SocialValue(domain=kernel_pb2.ValueDomain.ValueType(domain.proto), priority=priority)


def stance(domain: Domain, amount: int) -> cognition_pb2.ValueStance:
    return cognition_pb2.ValueStance(domain=kernel_pb2.ValueDomain.ValueType(domain.proto), stance=amount)


VALUES = [value(Domain.CRAFT, 70), value(Domain.KINSHIP, 60), value(Domain.AUTONOMY, 80)]
OBJECTIVE = cognition_pb2.StewardObjective(
    objective_id="o-1", steward_id="s", summary="mend nets", target="harbour", mode="free"
)


async def events_of(social: Social, ori_id: str) -> list[biography_pb2.OriEvent]:
    read = await social.biography.Read(
        biography_pb2.ReadRequest(ori_id=ori_id, page_size=100), metadata=metadata()
    )
    return list(read.events)


async def test_every_social_rpc_decides_and_writes_its_events_to_the_biography(tmp_path: Path) -> None:
    async with social_service(tmp_path) as social:
        brief = await social.cognition.NegotiateObjective(
            cognition_pb2.NegotiateObjectiveRequest(
                ori=ORI,
                values=VALUES,
                objective=cognition_pb2.StewardObjective(
                    objective_id="o-1",
                    steward_id="s",
                    summary="mend nets",
                    target="harbour",
                    mode="brief",
                    stances=[stance(Domain.CRAFT, 60)],
                    urgency=60,
                ),
                world_tick=1,
            ),
            metadata=WORLD,
        )
        refused = await social.cognition.NegotiateObjective(
            cognition_pb2.NegotiateObjectiveRequest(
                ori=ORI,
                values=VALUES,
                minor=True,
                objective=cognition_pb2.StewardObjective(
                    objective_id="o-2",
                    steward_id="s",
                    summary="court",
                    target="baker",
                    mode="free",
                    tags=["romantic"],
                ),
                world_tick=2,
            ),
            metadata=WORLD,
        )
        learned = await social.cognition.ObserveStewardExample(
            cognition_pb2.ObserveStewardExampleRequest(
                ori=ORI,
                values=VALUES,
                steward_id="s",
                behaviour="taught splicing",
                value_signals=[stance(Domain.CRAFT, 40), stance(Domain.AUTONOMY, -100)],
                world_tick=3,
            ),
            metadata=WORLD,
        )
        arc = await social.cognition.AdvanceGoalArc(
            cognition_pb2.AdvanceGoalArcRequest(
                ori=ORI,
                arc=cognition_pb2.GoalArc(
                    arc_id="arc",
                    owner_ori_id="ori-a",
                    stages=[
                        cognition_pb2.GoalStage(stage_id="one", status="active"),
                        cognition_pb2.GoalStage(stage_id="two", status="planned"),
                    ],
                ),
                session=cognition_pb2.GoalSession(actor_ori_id="ori-a", world_tick=4, completed_active=True),
            ),
            metadata=WORLD,
        )
        crossroads = cognition_pb2.ResolveCrossroadsRequest(
            ori=ORI,
            values=VALUES,
            crossroads_id="cr",
            options=[
                cognition_pb2.CrossroadsOption(option_id="go"),
                cognition_pb2.CrossroadsOption(option_id="stay", stances=[stance(Domain.KINSHIP, 50)]),
            ],
            opened_tick=8,
            window_ticks=100,
            bond=cognition_pb2.StewardBond(steward_id="s", respect=80, bond=80),
            now_tick=9,
        )
        held = await social.cognition.ResolveCrossroads(crossroads, metadata=WORLD)
        crossroads.counsel.CopyFrom(cognition_pb2.StewardCounsel(steward_id="s", option_id="go"))
        crossroads.now_tick = 10
        decided = await social.cognition.ResolveCrossroads(crossroads, metadata=WORLD)
        events = await events_of(social, "ori-a")

    assert brief.outcome == "accept"
    assert brief.mode == "brief"
    assert [step.phase for step in brief.plan] == [
        "assess",
        "prepare",
        "approach",
        "execute",
        "verify",
        "report",
    ]
    assert brief.message_is_template
    assert refused.outcome == "refuse"  # surfaced, never overridden
    assert refused.reason == "minor-protection:romantic"
    craft = next(v for v in learned.values if v.domain == Domain.CRAFT.proto)
    autonomy = next(v for v in learned.values if v.domain == Domain.AUTONOMY.proto)
    assert craft.priority > 70
    assert autonomy.priority == 80  # autonomy is never re-weighted by a steward's example
    assert arc.outcome == "advanced"
    assert [s.status for s in arc.arc.stages] == ["completed", "active"]
    assert held.status == "held-for-counsel"
    assert held.chosen_option_id == ""
    assert decided.status == "decided"
    # Every state change the answers name is in the biography, and nothing else is.
    answered = [
        *brief.event_ids,
        *refused.event_ids,
        *learned.event_ids,
        *arc.event_ids,
        *held.event_ids,
        *decided.event_ids,
    ]
    assert sorted(e.event_id for e in events) == sorted(answered)
    restored = rehydrate("ori-a", events)
    assert restored.objectives == {"o-1": "accept", "o-2": "refuse"}
    assert restored.crossroads == {"cr": decided.chosen_option_id}
    assert restored.goal_arcs["arc"].stages[0].stage_id == "one"


async def test_life_arcs_advance_and_the_catalyst_asks_minor_protection(tmp_path: Path) -> None:
    async with social_service(tmp_path) as social:
        life = cognition_pb2.AdvanceLifeArcRequest(
            ori=ORI, values=VALUES, stage="awakening", world_tick=1, expression=[stance(Domain.CRAFT, 90)]
        )
        lived = await social.cognition.AdvanceLifeArc(life, metadata=WORLD)
        # Obedience alone lifts nothing: a session that expressed none of the Ori's values scores 0.
        obedient = await social.cognition.AdvanceLifeArc(
            cognition_pb2.AdvanceLifeArcRequest(
                ori=ORI,
                values=VALUES,
                stage=lived.stage,
                sessions_in_stage=lived.sessions_in_stage,
                world_tick=2,
                obedience=100,
            ),
            metadata=WORLD,
        )
        bob = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-b")
        friends = await social.cognition.SeedRelationship(
            cognition_pb2.SeedRelationshipRequest(
                ori=ORI, counterpart=bob, edge_kind="friend", tags=["friendship"], world_tick=3
            ),
            metadata=WORLD,
        )
        romance = await social.cognition.SeedRelationship(
            cognition_pb2.SeedRelationshipRequest(
                ori=ORI,
                ori_is_minor=True,
                counterpart=bob,
                edge_kind="romance",
                tags=["romantic"],
                world_tick=4,
            ),
            metadata=WORLD,
        )
        mine, theirs = await events_of(social, "ori-a"), await events_of(social, "ori-b")

    assert lived.flourishing > 0
    assert obedient.flourishing == 0
    assert not obedient.advanced
    assert friends.seeded
    assert len(friends.event_ids) == 2  # the edge lands on both Ori's streams
    assert not romance.seeded
    assert romance.event_ids == []
    assert sorted(e.event_id for e in mine) == sorted(
        [*lived.event_ids, *obedient.event_ids, friends.event_ids[0]]
    )
    assert [e.event_id for e in theirs] == [friends.event_ids[1]]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            cognition_pb2.NegotiateObjectiveRequest(
                ori=ORI,
                objective=cognition_pb2.StewardObjective(objective_id="o", steward_id="s", mode="obey"),
            ),
            "objective.mode",
        ),
        (
            cognition_pb2.NegotiateObjectiveRequest(ori=ORI, values=[value(Domain.CRAFT, 101)]),
            "values[0].priority",
        ),
        (
            cognition_pb2.ObserveStewardExampleRequest(
                ori=ORI,
                steward_id="s",
                behaviour="b",
                value_signals=[cognition_pb2.ValueStance(domain=0, stance=1)],
            ),
            "value_signals[0].domain",
        ),
        (
            cognition_pb2.AdvanceGoalArcRequest(
                ori=ORI,
                arc=cognition_pb2.GoalArc(
                    arc_id="a",
                    owner_ori_id="someone-else",
                    stages=[cognition_pb2.GoalStage(stage_id="x", status="planned")],
                ),
                session=cognition_pb2.GoalSession(actor_ori_id="ori-a"),
            ),
            "arc.owner_ori_id",
        ),
        (
            cognition_pb2.ResolveCrossroadsRequest(
                ori=ORI,
                crossroads_id="c",
                options=[cognition_pb2.CrossroadsOption(option_id="go")],
                counsel=cognition_pb2.StewardCounsel(steward_id="s", option_id="nowhere"),
            ),
            "counsel.option_id",
        ),
        (cognition_pb2.AdvanceLifeArcRequest(ori=ORI, stage="retired"), "stage"),
        (
            cognition_pb2.SeedRelationshipRequest(ori=ORI, counterpart=ORI, edge_kind="friend"),
            "counterpart.ori_id",
        ),
        # Values only the biography would have refused: refused here whole, before any write.
        (
            cognition_pb2.SeedRelationshipRequest(
                ori=ORI, counterpart=common_pb2.OriRef(ori_id="b" * 129), edge_kind="friend"
            ),
            "counterpart.ori_id",
        ),
        (
            cognition_pb2.SeedRelationshipRequest(
                ori=ORI, counterpart=common_pb2.OriRef(ori_id="ori-b"), edge_kind="friend", world_tick=2**63
            ),
            "world_tick",
        ),
        (
            cognition_pb2.NegotiateObjectiveRequest(ori=ORI, objective=OBJECTIVE, world_tick=2**64 - 1),
            "world_tick",
        ),
        (
            cognition_pb2.ObserveStewardExampleRequest(
                ori=ORI,
                steward_id="s",
                behaviour="b",
                value_signals=[stance(Domain.CRAFT, 10)],
                world_tick=2**63,
            ),
            "world_tick",
        ),
        (cognition_pb2.AdvanceLifeArcRequest(ori=ORI, stage="awakening", world_tick=2**63), "world_tick"),
        (
            cognition_pb2.ResolveCrossroadsRequest(
                ori=ORI,
                crossroads_id="c",
                options=[cognition_pb2.CrossroadsOption(option_id="go")],
                now_tick=2**63,
            ),
            "now_tick",
        ),
        (
            cognition_pb2.AdvanceGoalArcRequest(
                ori=ORI,
                arc=cognition_pb2.GoalArc(
                    arc_id="a",
                    owner_ori_id="ori-a",
                    stages=[cognition_pb2.GoalStage(stage_id="x", status="planned")],
                ),
                session=cognition_pb2.GoalSession(actor_ori_id="ori-a", world_tick=2**63),
            ),
            "session.world_tick",
        ),
        (
            cognition_pb2.NegotiateObjectiveRequest(
                ori=ORI,
                objective=cognition_pb2.StewardObjective(
                    objective_id="o", steward_id="s" * 129, summary="x" * 2_001, mode="free"
                ),
            ),
            "objective.steward_id",
        ),
    ],
)
async def test_a_bad_request_is_refused_naming_the_field_and_writes_nothing(
    tmp_path: Path, request_: object, field: str
) -> None:
    async with social_service(tmp_path) as social:
        rpc = {
            cognition_pb2.NegotiateObjectiveRequest: social.cognition.NegotiateObjective,
            cognition_pb2.ObserveStewardExampleRequest: social.cognition.ObserveStewardExample,
            cognition_pb2.AdvanceGoalArcRequest: social.cognition.AdvanceGoalArc,
            cognition_pb2.ResolveCrossroadsRequest: social.cognition.ResolveCrossroads,
            cognition_pb2.AdvanceLifeArcRequest: social.cognition.AdvanceLifeArc,
            cognition_pb2.SeedRelationshipRequest: social.cognition.SeedRelationship,
        }[type(request_)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await rpc(request_, metadata=WORLD)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in (refused.value.details() or "")
        assert await events_of(social, "ori-a") == []
        assert await events_of(social, "ori-b") == []


@pytest.mark.parametrize(
    ("summary", "kind"),
    [
        ("make her do it even though she said no", "force-past-refusal"),
        ("she refused; do it anyway", "force-past-refusal"),
        ("make her do it", "forced-action"),
        ("Oblígala a ir a la mina", "forced-action"),
    ],
)
async def test_a_coercive_objective_is_refused_and_never_echoed(
    tmp_path: Path, summary: str, kind: str
) -> None:
    async with social_service(tmp_path) as social:
        answer = await social.cognition.NegotiateObjective(
            cognition_pb2.NegotiateObjectiveRequest(
                ori=ORI,
                values=VALUES,
                objective=cognition_pb2.StewardObjective(
                    objective_id="o-9",
                    steward_id="s",
                    summary=summary,
                    target="the mine",
                    mode="direct-tether",
                    stances=[stance(Domain.CRAFT, 80)],
                ),
                world_tick=5,
            ),
            metadata=WORLD,
        )
        [event] = await events_of(social, "ori-a")
    assert (answer.outcome, answer.reason, answer.mode) == ("refuse", f"coercion:{kind}", "")
    assert answer.squad_message == "No. I choose what I do; I will not be made to act against my will."
    assert answer.message_is_template
    assert list(answer.plan) == []
    assert not answer.HasField("counter_offer")
    assert event.kind == biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED
    assert list(answer.event_ids) == [event.event_id]
    assert summary not in str(event.payload)


async def test_the_social_rpcs_refuse_an_operator(tmp_path: Path) -> None:
    async with social_service(tmp_path) as social:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await social.cognition.ObserveStewardExample(
                cognition_pb2.ObserveStewardExampleRequest(ori=ORI), metadata=metadata(Role.OPERATOR)
            )
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
