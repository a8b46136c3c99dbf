"""PolicyService over real gRPC: evaluators answer, bad input is INVALID_ARGUMENT, errors reject."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_status import rpc_status

from assembly.settings import load_settings
from egbe.v1 import common_pb2, policy_pb2, policy_pb2_grpc
from policy_service import servicer as policy_servicer_module
from policy_service.server import build_bundle
from services.errors import field_violations
from tests.integration.inprocess_services import channel_to, metadata, serve_bundles, token_store

ORI = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-1")


@pytest.fixture(scope="module")
async def policy() -> AsyncIterator[policy_pb2_grpc.PolicyServiceStub]:
    settings = load_settings(data_dir="/nonexistent-egbe-test")
    bundle = await build_bundle(settings, token_store())
    async with serve_bundles([bundle], settings) as served, channel_to(served.target("policy")) as channel:
        yield policy_pb2_grpc.PolicyServiceStub(channel)


def _gate(**overrides: object) -> policy_pb2.GateRequest:
    request = policy_pb2.GateRequest(
        ori=ORI,
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        output_id="out-1",
        mode="dialogue",
        utterance="I remember the flood; the ferry runs again now.",
        cited_memory_refs=["mem-1"],
        established_memory_refs=["mem-1"],
    )
    for key, value in overrides.items():
        field = getattr(request, key)
        if isinstance(value, list):
            del field[:]
            field.extend(value)
        else:
            setattr(request, key, value)
    return request


async def test_gate_approves_and_rejects_with_per_check_reasons(
    policy: policy_pb2_grpc.PolicyServiceStub,
) -> None:
    approved = await policy.Gate(_gate(), metadata=metadata())
    assert approved.decision == policy_pb2.POLICY_DECISION_APPROVED
    assert approved.output_id == "out-1"
    assert len(approved.checks) == 4
    assert all(c.passed for c in approved.checks)

    rejected = await policy.Gate(_gate(cited_memory_refs=["mem-ghost"]), metadata=metadata())
    assert rejected.decision == policy_pb2.POLICY_DECISION_REJECTED
    failing = [c for c in rejected.checks if not c.passed]
    assert [c.check for c in failing] == ["personal-consistency"]
    assert "mem-ghost" in failing[0].reason


async def test_gate_refuses_bad_input_naming_the_field(policy: policy_pb2_grpc.PolicyServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await policy.Gate(
            _gate(output_id="", tier=common_pb2.COGNITION_TIER_UNSPECIFIED), metadata=metadata()
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert {v.field for v in field_violations(status)} == {"output_id", "tier"}


async def test_an_evaluator_error_answers_as_a_rejection_with_its_reason(
    policy: policy_pb2_grpc.PolicyServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> object:
        raise RuntimeError("phrase table unreadable")

    monkeypatch.setattr(policy_servicer_module, "gate_output", broken)
    monkeypatch.setattr(policy_servicer_module, "ground_claims", broken)
    monkeypatch.setattr(policy_servicer_module, "review_cultural_backstory", broken)
    monkeypatch.setattr(policy_servicer_module, "check_minor_protection", broken)

    gate = await policy.Gate(_gate(), metadata=metadata())
    assert gate.decision == policy_pb2.POLICY_DECISION_REJECTED
    assert "phrase table unreadable" in gate.checks[0].reason

    claim = policy_pb2.Claim(claim_id="c1", kind=policy_pb2.CLAIM_KIND_OPINION, text="fine day")
    ground = await policy.Ground(policy_pb2.GroundRequest(ori=ORI, claims=[claim]), metadata=metadata())
    assert not ground.passed
    assert ground.unsupported_claim_count == 1
    assert "phrase table unreadable" in ground.checks[0].reason

    review = await policy.ReviewCulturalBackstory(
        policy_pb2.ReviewCulturalBackstoryRequest(ori=ORI, locale="yo-NG"), metadata=metadata()
    )
    assert not review.approved_for_locale
    minor = await policy.CheckMinorProtection(
        policy_pb2.CheckMinorProtectionRequest(ori=ORI, surface=policy_pb2.PROTECTION_SURFACE_SCENARIO),
        metadata=metadata(),
    )
    assert not minor.allowed
    assert minor.checks[0].check == "internal-error"


async def test_ground_reports_fabricated_world_facts(policy: policy_pb2_grpc.PolicyServiceStub) -> None:
    request = policy_pb2.GroundRequest(
        ori=ORI,
        claims=[
            policy_pb2.Claim(
                claim_id="c1", kind=policy_pb2.CLAIM_KIND_FACT, text="The ferry crosses the river daily."
            ),
            policy_pb2.Claim(
                claim_id="c2", kind=policy_pb2.CLAIM_KIND_FACT, text="A comet destroyed the capital."
            ),
        ],
        evidence=[policy_pb2.Evidence(evidence_id="ev-1", text="The river ferry crosses twice daily.")],
    )
    response = await policy.Ground(request, metadata=metadata())
    assert not response.passed
    assert [(g.claim_id, g.supported, list(g.evidence_ids)) for g in response.groundings] == [
        ("c1", True, ["ev-1"]),
        ("c2", False, []),
    ]
    assert response.fabricated_world_fact_count == 1


async def test_cultural_review_over_grpc(policy: policy_pb2_grpc.PolicyServiceStub) -> None:
    evidence = policy_pb2.Evidence(evidence_id="ev-1", text="Iseyin weavers make aso-oke cloth by hand.")
    request = policy_pb2.ReviewCulturalBackstoryRequest(
        ori=ORI,
        locale="yo-NG",
        review_source_locale="yo-NG",
        claims=[
            policy_pb2.Claim(
                claim_id="c1",
                kind=policy_pb2.CLAIM_KIND_BACKSTORY,
                text="She weaves aso-oke cloth in Iseyin.",
                locale="yo-NG",
            )
        ],
        evidence=[evidence],
        attestations=[
            policy_pb2.ReviewerAttestation(role=role, reviewer_id=f"r{i}", passed=True, evidence_ids=["ev-1"])
            for i, role in enumerate(("source-grounding", "local-cultural-adapter", "community-advisor"))
        ],
    )
    approved = await policy.ReviewCulturalBackstory(request, metadata=metadata())
    assert approved.approved_for_locale
    del request.attestations[-1]
    refused = await policy.ReviewCulturalBackstory(request, metadata=metadata())
    assert not refused.approved_for_locale
    assert not refused.role_coverage_passed


async def test_minor_protection_over_grpc_and_unnamed_surface_is_refused(
    policy: policy_pb2_grpc.PolicyServiceStub,
) -> None:
    blocked = await policy.CheckMinorProtection(
        policy_pb2.CheckMinorProtectionRequest(
            ori=ORI, ori_is_minor=True, surface=policy_pb2.PROTECTION_SURFACE_DEATH_PATH
        ),
        metadata=metadata(),
    )
    assert not blocked.allowed
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await policy.CheckMinorProtection(
            policy_pb2.CheckMinorProtectionRequest(ori=ORI, ori_is_minor=True), metadata=metadata()
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def _refused_fields(call: object) -> list[str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    return [v.field for v in field_violations(status)]


def _claim(i: int, text: str = "The ferry crosses the river daily.") -> policy_pb2.Claim:
    return policy_pb2.Claim(claim_id=f"c{i}", kind=policy_pb2.CLAIM_KIND_FACT, text=text)


def _evidence(i: int, text: str = "The river ferry crosses twice daily.") -> policy_pb2.Evidence:
    return policy_pb2.Evidence(evidence_id=f"ev-{i}", text=text)


async def test_ground_at_its_limits_answers_and_past_them_is_refused_by_field(
    policy: policy_pb2_grpc.PolicyServiceStub,
) -> None:
    at_limit = policy_pb2.GroundRequest(
        ori=ORI, claims=[_claim(i) for i in range(32)], evidence=[_evidence(i) for i in range(256)]
    )
    answered = await policy.Ground(at_limit, metadata=metadata())
    assert answered.passed
    assert len(answered.groundings[31].evidence_ids) == 256

    too_many = policy_pb2.GroundRequest(
        ori=ORI, claims=[_claim(i) for i in range(33)], evidence=[_evidence(i) for i in range(5_000)]
    )
    assert await _refused_fields(policy.Ground(too_many, metadata=metadata())) == ["claims", "evidence"]

    too_long = policy_pb2.GroundRequest(
        ori=ORI,
        claims=[_claim(0, "ferry " * 101)],
        evidence=[
            policy_pb2.Evidence(evidence_id="e" * 129, text="river " * 334, tags=["t"] * 17),
        ],
    )
    assert await _refused_fields(policy.Ground(too_long, metadata=metadata())) == [
        "claims[0].text",
        "evidence[0].evidence_id",
        "evidence[0].text",
        "evidence[0].tags",
    ]


async def test_classify_steward_text_names_the_field_kind_and_rule(
    policy: policy_pb2_grpc.PolicyServiceStub,
) -> None:
    answer = await policy.ClassifyStewardText(
        policy_pb2.ClassifyStewardTextRequest(
            texts=[
                policy_pb2.StewardText(field="directive.text", text="She refused; do it anyway."),
                policy_pb2.StewardText(field="objective.target", text="the mill"),
            ]
        ),
        metadata=metadata(),
    )
    assert (answer.coercive, answer.kind) == (True, policy_pb2.COERCION_KIND_FORCE_PAST_REFUSAL)
    assert [(f.field, f.kind, f.rule) for f in answer.findings] == [
        ("directive.text", policy_pb2.COERCION_KIND_FORCE_PAST_REFUSAL, "en:refused+en:despite")
    ]
    benign = await policy.ClassifyStewardText(
        policy_pb2.ClassifyStewardTextRequest(
            texts=[policy_pb2.StewardText(field="directive.text", text="Don't make her do it.")]
        ),
        metadata=metadata(),
    )
    assert (benign.coercive, benign.kind, list(benign.findings)) == (
        False,
        policy_pb2.COERCION_KIND_UNSPECIFIED,
        [],
    )
    assert await _refused_fields(
        policy.ClassifyStewardText(policy_pb2.ClassifyStewardTextRequest(), metadata=metadata())
    ) == ["texts"]
    assert await _refused_fields(
        policy.ClassifyStewardText(
            policy_pb2.ClassifyStewardTextRequest(texts=[policy_pb2.StewardText(text="x" * 4_001)]),
            metadata=metadata(),
        )
    ) == ["texts[0].text"]
