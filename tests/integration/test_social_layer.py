"""The social layer against the real biography and policy services over gRPC (SQLite, loopback)."""

from __future__ import annotations

from pathlib import Path

from assembly.settings import load_settings
from biography_service.server import build_bundle as build_biography
from cognition_service.social.catalyst import RelationshipSeed
from cognition_service.social.crossroads import Bond, Counsel, Crossroads, CrossroadsOption
from cognition_service.social.goal_arcs import GoalArc, GoalStage, Session, StageStatus
from cognition_service.social.layer import SocialLayer
from cognition_service.social.learning import Demonstration
from cognition_service.social.life_arcs import LifeArc, LivedSession
from cognition_service.social.objectives import ExecutionMode, Objective, OriContext
from cognition_service.social.ports import GrpcEventAppender, GrpcSocialPolicyClient
from cognition_service.social.rehydration import rehydrate
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2, biography_pb2_grpc, common_pb2, policy_pb2_grpc
from policy_service.server import build_bundle as build_policy
from tests.integration.inprocess_services import channel_to, metadata, serve_bundles, token_store


def _ref(ori_id: str) -> common_pb2.OriRef:
    return common_pb2.OriRef(tenant_id="t", world_id="w", ori_id=ori_id)


async def test_social_changes_land_in_the_biography_and_rehydrate(tmp_path: Path) -> None:
    settings = load_settings(data_dir=str(tmp_path))
    bundles = [await build_biography(settings, token_store()), await build_policy(settings, token_store())]
    async with (
        serve_bundles(bundles, settings) as served,
        channel_to(served.target("biography")) as biography_channel,
        channel_to(served.target("policy")) as policy_channel,
    ):
        biography = biography_pb2_grpc.BiographyServiceStub(biography_channel)
        social = SocialLayer(
            GrpcEventAppender(biography, metadata()),  # type: ignore[arg-type]
            GrpcSocialPolicyClient(policy_pb2_grpc.PolicyServiceStub(policy_channel), metadata()),  # type: ignore[arg-type]
        )
        values = RankedValues.of({Domain.CRAFT: 70, Domain.KINSHIP: 60, Domain.AUTONOMY: 80})
        ori = OriContext("ori-a", values, minor=True)
        await social.assign_objective(
            ori, Objective("o-1", "s", "mend nets", "harbour", ExecutionMode.BRIEF), 1
        )
        learned = await social.learn_from_demonstration(
            "ori-a", values, Demonstration("s", "taught splicing", {Domain.CRAFT: 40}), 2
        )
        arc = GoalArc("arc", "ori-a", (GoalStage("one", StageStatus.ACTIVE), GoalStage("two")))
        arc = (await social.advance_goal_arc(arc, Session("ori-a", 3, completed_active=True))).arc
        friends = await social.seed_relationship(
            RelationshipSeed(
                _ref("ori-a"), True, _ref("ori-b"), False, "friend", frozenset({"friendship"}), 4
            )
        )
        romance = await social.seed_relationship(
            RelationshipSeed(_ref("ori-a"), True, _ref("ori-c"), False, "romance", frozenset({"romantic"}), 5)
        )
        refusal = Objective(
            "o-2", "s", "court the baker", "baker", ExecutionMode.FREE, tags=frozenset({"romantic"})
        )
        await social.assign_objective(ori, refusal, 6)
        life = (
            await social.advance_life_arc(LifeArc("ori-a"), values, LivedSession(7, {Domain.CRAFT: 90}))
        ).arc
        fork = Crossroads(
            "cr", [CrossroadsOption("go"), CrossroadsOption("stay", {Domain.KINSHIP: 50})], 8, 100
        )
        bond = Bond("s", 80, 80)
        await social.resolve_crossroads("ori-a", values, fork, bond=bond, counsel=None, now_tick=9)
        await social.resolve_crossroads(
            "ori-a", values, fork, bond=bond, counsel=Counsel("s", "go"), now_tick=10
        )
        # A retried change is appended once (stable event ids).
        await social.assign_objective(
            ori, Objective("o-1", "s", "mend nets", "harbour", ExecutionMode.BRIEF), 1
        )
        read = await biography.Read(
            biography_pb2.ReadRequest(ori_id="ori-a", page_size=100), metadata=metadata()
        )

    assert friends.seeded
    assert not romance.seeded
    assert len(read.events) == 1 + 2 + 1 + 1 + 1 + 1 + 2
    restored = rehydrate("ori-a", read.events)
    assert restored.life_arc == life
    assert restored.crossroads == {"cr": "stay"}
    assert restored.values == learned.values
    assert restored.goal_arcs == {"arc": arc}
    assert restored.objectives == {"o-1": "accept", "o-2": "refuse"}
    assert restored.relationships == {"ori-b": "friend"}
