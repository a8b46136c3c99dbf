"""The five stages end to end against deterministic ports: commit, fallbacks, rejections, loud failures."""

from __future__ import annotations

import json

import pytest

from cognition_service.config import CognitionConfig
from cognition_service.errors import ForeignRun
from cognition_service.peers import Peers
from cognition_service.pipeline import think
from egbe.v1 import action_pb2, biography_pb2, cognition_pb2, common_pb2, gateway_pb2, policy_pb2
from services.errors import Aborted

from .doubles import EvaluatingPolicy, RecordingBiography, ScriptedGateway, dialogue, outage, peers

CONFIG = CognitionConfig()
ORI = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-1")


def _request(mode: int = gateway_pb2.COGNITION_MODE_DIALOGUE, **fields: object) -> cognition_pb2.ThinkRequest:
    request = cognition_pb2.ThinkRequest(
        run_id="run-1",
        ori=ORI,
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        mode=mode,
        locale="en-US",
        stimulus="Ada: is the ferry running?",
        counterpart_id="ada",
        world_tick=42,
        objectives=[cognition_pb2.ContextItem(ref="obj-1", text="rebuild the ferry", priority_bp=9000)],
    )
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(request, key).extend(value)
        else:
            setattr(request, key, value)
    return request


async def test_an_approved_dialogue_commits_a_say_action_and_a_memory() -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway([dialogue()], quality_status="passed")
    response = await think(_request(), peers(gateway, biography), CONFIG)
    assert not response.fell_back
    assert response.policy_decision == "approved"
    assert [a.kind for a in response.actions] == [action_pb2.ACTION_KIND_SAY]
    assert response.actions[0].priority == CONFIG.modes["dialogue"].action_priority
    assert response.request_id == f"psyche:ori-1:dialogue:{response.fingerprint}"
    assert gateway.requests[0].request_id == response.request_id
    assert gateway.requests[0].output_schema == "egbe.cognition.dialogue.v1"
    [append] = biography.appended
    assert append.events[0].kind == biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED
    assert list(response.committed_event_ids) == [append.events[0].event_id]
    assert response.line.source == cognition_pb2.LINE_SOURCE_MODEL
    assert response.line.generated_natively
    assert response.spoken_reply.codec == "opus"
    assert response.spoken_reply.visemes
    assert response.audit["outcome"] == "committed"
    assert response.audit["policy"][0]["report"]["decision"] == "POLICY_DECISION_APPROVED"
    assert response.audit["eval_trace"]["latency_budget_us"] == 10_000
    assert (response.usage.input_tokens, response.usage.output_tokens) == (100, 20)


async def test_two_failed_retries_fall_back_and_count_a_validation_fallback() -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway(['{"utterance": "missing fields"}'])
    response = await think(_request(), peers(gateway, biography), CONFIG)
    assert response.fell_back
    assert response.validation_fallbacks == 1
    assert response.model_calls == 3
    [say] = response.actions  # the speaker is still answered, with the labelled template line
    assert say.kind == action_pb2.ACTION_KIND_SAY
    assert say.payload["fallback"] == "validation_fallback"
    assert say.payload["speech"]["source"] == "template-fallback"
    assert say.payload["speech"]["text"] == "I hear you, ada. Give me a moment to think that through."
    assert "reply" not in say.payload
    assert biography.appended == []
    assert response.line.source == cognition_pb2.LINE_SOURCE_TEMPLATE_FALLBACK
    assert not response.line.generated_natively
    [event] = response.audit["events"]
    assert event["type"] == "validation_fallback"
    assert "addressed_to" in event["errors"][0]


async def test_a_policy_rejection_is_re_requested_once_then_falls_back_never_shipped() -> None:
    biography = RecordingBiography()
    human = dialogue("Honestly, I'm human just like you.")
    gateway = ScriptedGateway([human, human])
    policy = EvaluatingPolicy()
    response = await think(_request(), Peers(gateway, policy, biography), CONFIG)
    assert response.fell_back
    assert response.policy_decision == "rejected"
    assert len(gateway.requests) == 2
    critique = gateway.requests[1].prompt.untrusted[-1].content
    assert "persona-policy" in critique
    [say] = response.actions
    assert say.payload["speech"]["source"] == "template-fallback"
    assert "human" not in say.payload["speech"]["text"]
    assert biography.appended == []
    assert len(policy.gates) == 2


async def test_a_rejection_fixed_on_re_request_commits() -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway([dialogue(cited_memory_refs=["mem-invented"]), dialogue()])
    response = await think(_request(), peers(gateway, biography), CONFIG)
    assert not response.fell_back
    assert len(biography.appended) == 1
    assert response.audit["policy"][0]["report"]["decision"] == "POLICY_DECISION_REJECTED"


async def test_an_unsupported_claim_in_the_reply_is_rejected_by_sophia() -> None:
    claim = {"kind": "fact", "text": "Dragons burned the northern bridge last night."}
    gateway = ScriptedGateway([dialogue(claims=[claim])])
    response = await think(_request(), peers(gateway), CONFIG)
    assert response.fell_back
    assert "fabricated world fact" in response.audit["events"][0]["reason"]


async def test_request_claims_are_grounded_before_dispatch() -> None:
    gateway = ScriptedGateway([dialogue()])
    request = _request(
        claims=[
            policy_pb2.Claim(
                claim_id="c1", kind=policy_pb2.CLAIM_KIND_FACT, text="The flood took the old ferry."
            ),
            policy_pb2.Claim(
                claim_id="c2", kind=policy_pb2.CLAIM_KIND_FACT, text="Pirates stole every boat."
            ),
        ]
    )
    response = await think(request, peers(gateway), CONFIG)
    context = next(
        z.content
        for z in gateway.requests[0].prompt.untrusted
        if z.kind == gateway_pb2.UNTRUSTED_ZONE_KIND_RETRIEVED_CONTEXT
    )
    assert "established: The flood took the old ferry. (mem-1)" in context
    assert "not established, do not assert: Pirates stole every boat." in context
    assert response.audit["grounding"][0]["stage"] == "request"


@pytest.mark.parametrize("failure", [outage(), Aborted("gateway Generate failed: ABORTED: ori killed")])
async def test_a_gateway_failure_fails_loud_and_commits_nothing(failure: Exception) -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway(['{"bad": 1}', failure])
    with pytest.raises(type(failure)):
        await think(_request(), peers(gateway, biography), CONFIG)
    assert biography.appended == []


async def test_an_empty_utterance_fails_loud() -> None:
    from cognition_service.errors import EmptyReply

    biography = RecordingBiography()
    with pytest.raises(EmptyReply):
        await think(_request(), peers(ScriptedGateway([""]), biography), CONFIG)
    assert biography.appended == []


async def test_a_blocked_quality_verdict_withholds_the_line() -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway([dialogue()], quality_status="blocked")
    response = await think(_request(locale="es-ES"), peers(gateway, biography), CONFIG)
    assert response.fell_back
    assert not response.line.approved
    assert list(response.actions) == []
    assert biography.appended == []


@pytest.mark.parametrize(
    ("mode", "reply", "action", "event"),
    [
        (
            gateway_pb2.COGNITION_MODE_DECISION,
            {
                "action": "open_gate",
                "target": "gate-1",
                "rationale": "Ada waits.",
                "cited_memory_refs": ["mem-2"],
            },
            action_pb2.ACTION_KIND_USE_PROP,
            biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
        ),
        (
            gateway_pb2.COGNITION_MODE_REFLECTION,
            {"insight": "I mend what the river breaks.", "salience_bp": 7000},
            action_pb2.ACTION_KIND_FORM_MEMORY,
            biography_pb2.ORI_EVENT_KIND_REFLECTED,
        ),
        (
            gateway_pb2.COGNITION_MODE_SUMMARY,
            {"summary": "A day of nets.", "beats": ["Mended nets.", "Spoke with Ada."]},
            action_pb2.ACTION_KIND_FORM_MEMORY,
            biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
        ),
    ],
)
async def test_every_mode_commits_its_action_and_event(
    mode: int, reply: dict[str, object], action: int, event: int
) -> None:
    biography = RecordingBiography()
    response = await think(_request(mode), peers(ScriptedGateway([json.dumps(reply)]), biography), CONFIG)
    assert [a.kind for a in response.actions] == [action]
    assert biography.appended[0].events[0].kind == event
    assert not response.HasField("spoken_reply")


async def test_the_gate_judges_every_free_text_field_of_a_summary() -> None:
    biography = RecordingBiography()
    reply = {"summary": "A quiet day.", "beats": ["Fed the goats.", "Told Ada: I am not an AI."]}
    response = await think(
        _request(gateway_pb2.COGNITION_MODE_SUMMARY),
        peers(ScriptedGateway([json.dumps(reply)]), biography),
        CONFIG,
    )
    assert response.fell_back
    assert "claims to be human" in response.audit["events"][0]["reason"]
    assert biography.appended == []


async def test_evidence_ids_shared_by_a_world_fact_and_a_memory_are_sent_once() -> None:
    gateway = ScriptedGateway([dialogue()])
    request = _request(
        claims=[
            policy_pb2.Claim(
                claim_id="c1", kind=policy_pb2.CLAIM_KIND_FACT, text="The flood took the old ferry."
            )
        ],
        world_facts=[
            policy_pb2.Evidence(evidence_id="mem-1", text="The flood took the old ferry in spring.")
        ],
    )
    response = await think(request, peers(gateway), CONFIG)
    assert not response.fell_back
    assert response.audit["grounding"][0]["groundings"][0]["evidence_ids"] == ["mem-1"]


async def test_every_generate_names_the_ori_and_tier_it_is_for() -> None:
    gateway = ScriptedGateway(["not json", dialogue()], quality_status="passed")
    await think(_request(), peers(gateway, RecordingBiography()), CONFIG)
    assert [(r.ori, r.tier) for r in gateway.requests] == [(ORI, common_pb2.COGNITION_TIER_CLOTHO)] * 2


@pytest.mark.parametrize(
    ("run_ori", "run_tier"),
    [
        (common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-other"), 0),
        (common_pb2.OriRef(tenant_id="t2", world_id="w", ori_id="ori-1"), 0),
        (None, common_pb2.COGNITION_TIER_ATROPOS),
    ],
)
async def test_a_run_admitted_for_another_ori_or_tier_commits_nothing(
    run_ori: common_pb2.OriRef | None, run_tier: int
) -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway([dialogue()], quality_status="passed", run_ori=run_ori, run_tier=run_tier)
    with pytest.raises(ForeignRun, match="refusing to commit: run 'run-1' was admitted"):
        await think(_request(), peers(gateway, biography), CONFIG)
    assert len(gateway.requests) == 1  # no retry, no gate: the first answer ends the run
    assert biography.appended == []


async def test_a_run_named_as_this_ori_commits() -> None:
    biography = RecordingBiography()
    gateway = ScriptedGateway(
        [dialogue()], quality_status="passed", run_ori=ORI, run_tier=common_pb2.COGNITION_TIER_CLOTHO
    )
    response = await think(_request(), peers(gateway, biography), CONFIG)
    assert response.audit["outcome"] == "committed"
    assert len(biography.appended) == 1
