"""Stage 5, commit: assert attribution, map mode to action, draft the biography events and the audit."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2

from cognition_service.failures import AttributionMismatch
from cognition_service.output_schemas import (
    GOAL_LIBRARY,
    ChosenGoal,
    DecisionReply,
    DialogueReply,
    ReflectionReply,
    SummaryReply,
)
from egbe.v1 import action_pb2, biography_pb2, common_pb2, gateway_pb2, policy_pb2
from kernel_service.behavior.goal_refs import INSTANCE_MASK, encode_goal_ref

ACTION_KINDS = {
    "dialogue": action_pb2.ACTION_KIND_SAY,
    "decision": action_pb2.ACTION_KIND_USE_PROP,
    "reflection": action_pb2.ACTION_KIND_FORM_MEMORY,
    "summary": action_pb2.ACTION_KIND_FORM_MEMORY,
}
EVENT_KINDS = {
    "dialogue": biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
    "decision": biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
    "reflection": biography_pb2.ORI_EVENT_KIND_REFLECTED,
    "summary": biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
}
# Event ids derive from the run so a re-delivered Think appends nothing twice (the biography is idempotent).
EVENT_NAMESPACE = uuid.UUID("6f1d2a8e-5b0c-4f7e-9a41-0c2f3e9d7b15")

Reply = DialogueReply | DecisionReply | ReflectionReply | SummaryReply


@dataclass(frozen=True)
class RunIdentity:
    """Who asked and why: every committed artefact must name exactly this."""

    run_id: str
    ori: common_pb2.OriRef
    tier: common_pb2.CognitionTier.ValueType
    mode: str
    request_id: str
    fingerprint: str
    world_tick: int


@dataclass(frozen=True)
class Dispatched:
    """A validated reply as Psyche returns it, attributed to an Ori, a tier and an output id."""

    ori_id: str
    tier: common_pb2.CognitionTier.ValueType
    output_id: str
    reply: Reply
    response: gateway_pb2.GenerateResponse


def assert_attribution(
    identity: RunIdentity, dispatched: Dispatched, decision: policy_pb2.GateResponse
) -> None:
    """A committed action can never be attributed to another Ori, tier or output than the request's."""
    mismatches = []
    if dispatched.ori_id != identity.ori.ori_id:
        mismatches.append(f"response ori {dispatched.ori_id!r} != request ori {identity.ori.ori_id!r}")
    if dispatched.tier != identity.tier:
        mismatches.append(f"response tier {dispatched.tier} != request tier {identity.tier}")
    if decision.output_id != dispatched.output_id:
        mismatches.append(
            f"policy output {decision.output_id!r} != dispatched output {dispatched.output_id!r}"
        )
    if mismatches:
        raise AttributionMismatch("refusing to commit: " + "; ".join(mismatches))


def memory_text(reply: Reply) -> tuple[str, int | None]:
    """What the Ori will remember of its own output, and the salience the reply gave it if any."""
    if isinstance(reply, DialogueReply):
        return f"I said to {reply.addressed_to}: {reply.utterance}", None
    if isinstance(reply, DecisionReply):
        return f"I chose to {reply.action} ({reply.target}): {reply.rationale}", None
    if isinstance(reply, ReflectionReply):
        return reply.insight, reply.salience_bp
    return reply.summary, None


def provenance(
    identity: RunIdentity, dispatched: Dispatched, decision: policy_pb2.GateResponse
) -> dict[str, Any]:
    response = dispatched.response
    return {
        "run_id": identity.run_id,
        "request_id": identity.request_id,
        "fingerprint": identity.fingerprint,
        "output_id": dispatched.output_id,
        "call_id": response.call_id,
        "model_ref": response.model_ref,
        "offline": response.offline,
        "policy_ref": decision.policy_ref,
        "tier": common_pb2.CognitionTier.Name(identity.tier),
    }


def provenance_ref(identity: RunIdentity, dispatched: Dispatched) -> str:
    return f"cognition:{identity.run_id}:{dispatched.response.call_id or dispatched.output_id}"


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def goal_ref_for(goal: ChosenGoal, target: str) -> int:
    """A decision's chosen goal as the kernel's structured goal ref (kernel_service/behavior/goal_refs):
    its family and tags, and an instance named by the target (never 0, which marks a goal the Ori
    surfaced from its own needs). The kernel adopts it, so the HTN pursues it after the call."""
    tags = sum(GOAL_LIBRARY.tag_bit(tag) for tag in set(goal.tags))
    return encode_goal_ref(goal.family.family, tags, zlib.crc32(target.encode()) % INSTANCE_MASK + 1)


def action_for(
    identity: RunIdentity, dispatched: Dispatched, priority: int, extra: dict[str, Any]
) -> action_pb2.ActionIntent:
    """mode → action: dialogue SAY, decision USE_PROP (with its chosen goal's ref), reflection and
    summary FORM_MEMORY."""
    payload = {
        "mode": identity.mode,
        "run_id": identity.run_id,
        "request_id": identity.request_id,
        "output_id": dispatched.output_id,
        "offline": dispatched.response.offline,
        "reply": dispatched.reply.model_dump(mode="json", exclude_none=True),
        **extra,
    }
    reply = dispatched.reply
    goal_ref = (
        goal_ref_for(reply.goal, reply.target) if isinstance(reply, DecisionReply) and reply.goal else 0
    )
    return action_pb2.ActionIntent(
        ori_id=identity.ori.ori_id,
        kind=ACTION_KINDS[identity.mode],
        goal_ref=goal_ref,
        priority=priority,
        tier=identity.tier,
        source=action_pb2.ACTION_SOURCE_COGNITION,
        payload=to_struct(payload),
    )


def event_for(
    identity: RunIdentity, dispatched: Dispatched, decision: policy_pb2.GateResponse
) -> biography_pb2.NewOriEvent:
    """MemoryFormed (or Reflected for a reflection) carrying its provenance bundle."""
    text, salience = memory_text(dispatched.reply)
    payload: dict[str, Any] = {
        "text": text,
        "mode": identity.mode,
        "cited_memory_refs": list(getattr(dispatched.reply, "cited_memory_refs", [])),
        "provenance": provenance(identity, dispatched, decision),
    }
    if salience is not None:
        payload["salience_bp"] = salience
    return biography_pb2.NewOriEvent(
        event_id=str(uuid.uuid5(EVENT_NAMESPACE, f"{identity.run_id}/{identity.request_id}/0")),
        kind=EVENT_KINDS[identity.mode],
        payload=to_struct(payload),
        world_tick=identity.world_tick,
        provenance_ref=provenance_ref(identity, dispatched),
    )


def append_request(
    identity: RunIdentity, events: list[biography_pb2.NewOriEvent]
) -> biography_pb2.AppendRequest:
    """One atomic append: either every event of the run is recorded or none is."""
    return biography_pb2.AppendRequest(
        ori_id=identity.ori.ori_id,
        expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
        events=events,
    )
