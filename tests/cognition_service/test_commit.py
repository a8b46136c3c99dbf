"""Commit: attribution is asserted, mode maps to action and event kind, event ids are idempotent."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cognition_service import commit
from cognition_service.errors import AttributionMismatch
from cognition_service.output_schemas import DecisionReply, DialogueReply, ReflectionReply, SummaryReply
from egbe.v1 import action_pb2, biography_pb2, common_pb2, gateway_pb2, policy_pb2
from kernel_service.behavior.htn import load_method_library
from services.goal_refs import AUTONOMOUS_INSTANCE, INSTANCE_MASK, goal_family, goal_tags, tag_bit

ORI = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-1")
REPLIES = {
    "dialogue": DialogueReply(utterance="Hello", addressed_to="ada", emotion="warm"),
    "decision": DecisionReply(action="open_gate", target="gate-1", rationale="Ada is waiting."),
    "reflection": ReflectionReply(insight="I mend what I can.", salience_bp=6_000),
    "summary": SummaryReply(summary="A day at the nets.", beats=["Mended nets."]),
}


def _identity(mode: str) -> commit.RunIdentity:
    return commit.RunIdentity(
        "run-1", ORI, common_pb2.COGNITION_TIER_CLOTHO, mode, f"psyche:ori-1:{mode}:ab", "ab", 7
    )


def _dispatched(mode: str, **overrides: object) -> commit.Dispatched:
    fields: dict[str, object] = {
        "ori_id": "ori-1",
        "tier": common_pb2.COGNITION_TIER_CLOTHO,
        "output_id": "run-1/1",
        "reply": REPLIES[mode],
        "response": gateway_pb2.GenerateResponse(call_id="call-1", model_ref="m", text="{}"),
    }
    fields.update(overrides)
    return commit.Dispatched(**fields)  # type: ignore[arg-type]


GATE = policy_pb2.GateResponse(
    output_id="run-1/1", decision=policy_pb2.POLICY_DECISION_APPROVED, policy_ref="p"
)


@pytest.mark.parametrize(
    ("overrides", "gate_output", "message"),
    [
        ({"ori_id": "ori-2"}, "run-1/1", "response ori"),
        ({"tier": common_pb2.COGNITION_TIER_ATROPOS}, "run-1/1", "response tier"),
        ({}, "run-9/1", "policy output"),
    ],
)
def test_misattribution_refuses_to_commit(
    overrides: dict[str, object], gate_output: str, message: str
) -> None:
    gate = policy_pb2.GateResponse(output_id=gate_output)
    with pytest.raises(AttributionMismatch, match=message):
        commit.assert_attribution(_identity("dialogue"), _dispatched("dialogue", **overrides), gate)


@pytest.mark.parametrize(
    ("mode", "action_kind", "event_kind"),
    [
        ("dialogue", action_pb2.ACTION_KIND_SAY, biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED),
        ("decision", action_pb2.ACTION_KIND_USE_PROP, biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED),
        ("reflection", action_pb2.ACTION_KIND_FORM_MEMORY, biography_pb2.ORI_EVENT_KIND_REFLECTED),
        ("summary", action_pb2.ACTION_KIND_FORM_MEMORY, biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED),
    ],
)
def test_mode_maps_to_action_and_event(mode: str, action_kind: int, event_kind: int) -> None:
    identity, dispatched = _identity(mode), _dispatched(mode)
    commit.assert_attribution(identity, dispatched, GATE)
    action = commit.action_for(identity, dispatched, 4_321, {})
    assert (action.kind, action.priority, action.ori_id) == (action_kind, 4_321, "ori-1")
    assert action.source == action_pb2.ACTION_SOURCE_COGNITION
    assert action.payload["request_id"] == identity.request_id
    event = commit.event_for(identity, dispatched, GATE, commit.Scene())
    assert event.kind == event_kind
    assert event.payload["text"]
    assert event.payload["provenance"]["call_id"] == "call-1"
    assert event.provenance_ref == "cognition:run-1:call-1"
    assert event.world_tick == 7
    assert event.event_id == commit.event_for(identity, dispatched, GATE, commit.Scene()).event_id
    if mode == "reflection":
        assert event.payload["salience_bp"] == 6_000


def test_a_decisions_chosen_goal_becomes_the_goal_ref_the_kernels_htn_decomposes() -> None:
    reply = DecisionReply.model_validate(
        {
            "action": "apologise",
            "target": "bram",
            "rationale": "I owe Bram an apology.",
            "goal": {"family": "social", "tags": ["relationship-repair"]},
        }
    )
    intent = commit.action_for(_identity("decision"), _dispatched("decision", reply=reply), 5_000, {})
    assert goal_family(intent.goal_ref) == common_pb2.GOAL_FAMILY_SOCIAL
    assert goal_tags(intent.goal_ref) == tag_bit("relationship-repair") == 1 << 2
    assert intent.goal_ref & INSTANCE_MASK != AUTONOMOUS_INSTANCE  # not a need-surfaced goal
    # The kernel's shipped method library decomposes it into its relationship-repair method.
    chosen = load_method_library().decompose(goal_family(intent.goal_ref), goal_tags(intent.goal_ref))
    assert chosen is not None
    assert chosen[1].requires_mask & tag_bit("relationship-repair")
    # The same decision always names the same goal; a decision without one names none.
    again = commit.action_for(_identity("decision"), _dispatched("decision", reply=reply), 5_000, {})
    assert again.goal_ref == intent.goal_ref
    assert commit.action_for(_identity("decision"), _dispatched("decision"), 5_000, {}).goal_ref == 0


@pytest.mark.parametrize("tag", ["minor-present", "threat-present", "need-rest", "no-such-tag"])
def test_a_chosen_goal_carries_only_tags_perception_does_not_set(tag: str) -> None:
    with pytest.raises(ValidationError, match="tags"):
        DecisionReply.model_validate(
            {"action": "a", "target": "t", "rationale": "r", "goal": {"family": "vocation", "tags": [tag]}}
        )
