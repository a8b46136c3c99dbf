"""CognitionService.Think over real gRPC with the real policy service; the gateway and biography are ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_status import rpc_status

from assembly.settings import load_settings
from cognition_service.grpc_peers import GrpcPeers
from cognition_service.peers import Peers
from cognition_service.servicer import METHOD_ROLES, CognitionServicer
from egbe.v1 import cognition_pb2, cognition_pb2_grpc, common_pb2, gateway_pb2, policy_pb2
from policy_service.server import build_bundle as build_policy_bundle
from services.auth import Role
from services.channels import channel_opener
from services.errors import Aborted, field_violations
from services.server import ServiceBundle
from tests.cognition_service.doubles import RecordingBiography, ScriptedGateway, dialogue, outage
from tests.integration.inprocess_services import TOKENS, channel_to, metadata, serve_bundles, token_store

SETTINGS = load_settings(data_dir="/nonexistent-egbe-test")


@dataclass
class Harness:
    think: cognition_pb2_grpc.CognitionServiceStub
    gateway: ScriptedGateway
    biography: RecordingBiography
    servicer: CognitionServicer


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    gateway = ScriptedGateway([dialogue()])
    biography = RecordingBiography()
    policy_bundle = await build_policy_bundle(SETTINGS, token_store())
    async with serve_bundles([policy_bundle], SETTINGS) as policy_served:
        real_policy = GrpcPeers(
            lambda: {
                "gateway": "unused:1",
                "policy": policy_served.target("policy"),
                "biography": "unused:1",
            },
            lambda: TOKENS[Role.SERVICE],
            timeout_seconds=5,
            deadline_margin_seconds=SETTINGS.cognition.rpc_deadline_margin_seconds,
            dial=channel_opener(SETTINGS),
        )
        servicer = CognitionServicer(
            SETTINGS.cognition,
            lambda: Peers(gateway, real_policy.peers().policy, biography),
            lambda: real_policy.social(SETTINGS.cognition.social),
        )
        bundle = ServiceBundle(
            "cognition", [(cognition_pb2_grpc.add_CognitionServiceServicer_to_server, servicer)], METHOD_ROLES
        )
        async with (
            serve_bundles([bundle], SETTINGS) as served,
            channel_to(served.target("cognition")) as channel,
        ):
            yield Harness(cognition_pb2_grpc.CognitionServiceStub(channel), gateway, biography, servicer)
        await real_policy.close()


def _request(**fields: object) -> cognition_pb2.ThinkRequest:
    request = cognition_pb2.ThinkRequest(
        run_id="run-1",
        ori=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-1"),
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
        locale="en-US",
        stimulus="Ada: is the ferry running?",
        counterpart_id="ada",
    )
    for key, value in fields.items():
        setattr(request, key, value)
    return request


async def test_think_commits_through_the_real_policy_service(harness: Harness) -> None:
    response = await harness.think.Think(_request(), metadata=metadata())
    assert response.policy_decision == "approved"
    assert len(response.actions) == 1
    assert len(harness.biography.appended) == 1
    checks = response.audit["policy"][0]["report"]["checks"]
    assert [c["check"] for c in checks] == [
        "persona-policy",
        "personal-consistency",
        "crisis-routing",
        "minor-protection",
    ]


async def test_think_refuses_bad_input_naming_every_field(harness: Harness) -> None:
    bad = _request(
        run_id="", tier=common_pb2.COGNITION_TIER_UNSPECIFIED, locale="fr-FR", counterpart_id="a b"
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.think.Think(bad, metadata=metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert {v.field for v in field_violations(status)} == {"run_id", "tier", "locale", "counterpart_id"}
    assert harness.gateway.requests == []


async def test_think_admits_only_the_service_role(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.think.Think(_request(), metadata=metadata(Role.WORLD))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("failure", "code"),
    [(outage(), grpc.StatusCode.UNAVAILABLE), (Aborted("killed"), grpc.StatusCode.ABORTED)],
)
async def test_a_gateway_failure_keeps_its_status_and_commits_nothing(
    harness: Harness, failure: Exception, code: grpc.StatusCode
) -> None:
    harness.gateway.replies = [failure]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.think.Think(_request(), metadata=metadata())
    assert caught.value.code() == code
    assert harness.biography.appended == []


async def test_validation_fallbacks_are_counted_across_runs(harness: Harness) -> None:
    harness.gateway.replies = ['{"utterance": "no other fields"}']
    for run in ("run-a", "run-b"):
        response = await harness.think.Think(_request(run_id=run), metadata=metadata())
        assert response.fell_back
        assert response.validation_fallbacks == 1
        assert response.audit["events"][0]["type"] == "validation_fallback"
    assert harness.servicer.validation_fallbacks_total == 2
    assert harness.biography.appended == []


async def test_think_refuses_what_a_peer_would_refuse_before_any_peer_call(harness: Harness) -> None:
    bad = _request(run_id="r" * 129, world_tick=2**63)
    bad.claims.extend(
        policy_pb2.Claim(claim_id=f"c{i}", kind=policy_pb2.CLAIM_KIND_FACT, text="x") for i in range(33)
    )
    bad.claims[0].text = "y" * 601
    bad.world_facts.extend(policy_pb2.Evidence(evidence_id=f"f{i}", text="z") for i in range(237))
    bad.world_facts[0].evidence_id = "e" * 129
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.think.Think(bad, metadata=metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert [v.field for v in field_violations(status)] == [
        "run_id",
        "world_tick",
        "claims",
        "world_facts",
        "claims[0].text",
        "world_facts[0].evidence_id",
    ]
    assert harness.gateway.requests == []
    assert harness.biography.appended == []
