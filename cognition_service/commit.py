"""Stage 5, commit: assert attribution, map mode to action, draft the biography events and the audit."""

from __future__ import annotations

import re
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from cognition_service.errors import AttributionMismatch, ForeignRun
from cognition_service.output_schemas import (
    ChosenGoal,
    DecisionReply,
    DialogueReply,
    ReflectionReply,
    SummaryReply,
)
from egbe.v1 import action_pb2, biography_pb2, common_pb2, gateway_pb2, policy_pb2
from services.goal_refs import INSTANCE_MASK, encode_goal_ref, tag_mask_of
from services.vocabulary import GOAL_FAMILIES_BY_NAME

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


def assert_run_is_for(request: gateway_pb2.GenerateRequest, response: gateway_pb2.GenerateResponse) -> None:
    """The run the gateway called the model in must be the one admitted for this Ori and tier: a run id
    borrowed from another Ori's admission never makes this Ori think."""
    mismatches = []
    run_ori, own = response.ori, request.ori
    if response.HasField("ori") and (run_ori.tenant_id, run_ori.world_id, run_ori.ori_id) != (
        own.tenant_id,
        own.world_id,
        own.ori_id,
    ):
        mismatches.append(
            f"run {request.run_id!r} was admitted for ori {run_ori.ori_id!r}, not {own.ori_id!r}"
        )
    if response.tier and response.tier != request.tier:
        mismatches.append(f"run {request.run_id!r} was admitted at tier {response.tier}, not {request.tier}")
    if mismatches:
        raise ForeignRun("refusing to commit: " + "; ".join(mismatches))


@dataclass(frozen=True)
class Scene:
    """What the run answered: whom, the line it heard, the crossroads in front of it, and the texts of
    the memories it recalled (which its own memory must never quote back)."""

    addressed_to: str = ""
    addressed_name: str = ""
    heard: str = ""
    crossroads_id: str = ""
    recalled: tuple[str, ...] = ()


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_LABEL = re.compile(r"^\[[^\]\n]{1,32}\]\s*")
_NOT_WORD = re.compile(r"\W+")
# A sentence this short ("Yes.", "I will.") recurs by chance; only longer ones count as quoting.
MIN_ECHO_WORDS = 3


def _normal(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


def _long(words: str) -> bool:
    return len(words.split()) >= MIN_ECHO_WORDS


def without_echo(text: str, recalled: tuple[str, ...]) -> str:
    """The text less every sentence found (normalised) in a recalled memory or quoting a whole sentence of
    one; a leading label is kept.

    So a reply that quotes the Ori's memories is remembered without them, and memories never nest."""
    label = _LABEL.match(text)
    body = text[label.end() :] if label else text
    memories = [_normal(m) for m in recalled]
    quoted = {q for m in recalled for s in _SENTENCE_END.split(m) if _long(q := _normal(s))}

    def echoed(sentence: str) -> bool:
        words = _normal(sentence)
        return _long(words) and (
            any(words in memory for memory in memories) or any(q in words for q in quoted)
        )

    kept = [sentence for sentence in _SENTENCE_END.split(body) if not echoed(sentence)]
    own = " ".join(s for s in kept if s.strip())
    return f"{label.group(0)}{own}" if label and own else own


def fold_repeats(texts: list[str]) -> list[str]:
    """Each text less the sentences an earlier text already holds (normalised), so recalled memories
    written by runs that overlapped never say the same sentence twice in one prompt."""
    seen: set[str] = set()
    folded = []
    for text in texts:
        kept = []
        for sentence in _SENTENCE_END.split(text):
            words = _normal(sentence)
            if _long(words) and words in seen:
                continue
            seen.add(words)
            kept.append(sentence)
        folded.append(" ".join(kept))
    return folded


def memory_text(reply: Reply, scene: Scene) -> tuple[str, int | None]:
    """What the Ori will remember of this run, as facts (who said what, what it answered or chose, and
    with whom), and the salience the reply gave it if any. Never a recalled memory's text."""
    if isinstance(reply, DialogueReply):
        name = scene.addressed_name or reply.addressed_to
        said = without_echo(reply.utterance, scene.recalled)
        answer = f'I answered {name}: "{said}"' if said else f"I answered {name} as I had before."
        return (f'{name} said to me: "{scene.heard}". {answer}' if scene.heard else answer), None
    if isinstance(reply, DecisionReply):
        where = f"At the crossroads {scene.crossroads_id}, " if scene.crossroads_id else ""
        chose = f"{where}I chose to {reply.action} ({reply.target})"
        with_whom = f" with {scene.addressed_name}" if scene.addressed_name else ""
        why = without_echo(reply.rationale, scene.recalled)
        return f"{chose}{with_whom}." + (f" Why: {why}" if why else ""), None
    if isinstance(reply, ReflectionReply):
        return without_echo(reply.insight, scene.recalled) or "I reflected again.", reply.salience_bp
    return without_echo(reply.summary, scene.recalled) or "Another day like the last.", None


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


def fill_struct(message: Message, target: struct_pb2.Struct) -> None:
    """`message` (no enums or 64-bit integers) as MessageToDict with proto field names would give it,
    written straight into `target`:
    a spoken reply's hundreds of viseme cues cost a tenth of the dict-then-update path."""
    for field, value in message.ListFields():
        if field.is_repeated:
            values = target.fields[field.name].list_value.values
            for element in value:
                _fill_value(field, element, values.add())
        else:
            _fill_value(field, value, target.fields[field.name])


def _fill_value(field: FieldDescriptor, value: Any, target: struct_pb2.Value) -> None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        fill_struct(value, target.struct_value)
    elif field.type == FieldDescriptor.TYPE_BOOL:
        target.bool_value = value
    elif field.type == FieldDescriptor.TYPE_STRING:
        target.string_value = value
    else:
        target.number_value = value


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def goal_ref_for(goal: ChosenGoal, target: str) -> int:
    """A decision's chosen goal as a structured goal ref (the protocol's layout, services.goal_refs):
    its family and tags, and an instance named by the target (never 0, which marks a goal the Ori
    surfaced from its own needs). The kernel adopts it, so the HTN pursues it after the call."""
    tags = tag_mask_of(set(goal.tags))
    family = GOAL_FAMILIES_BY_NAME[goal.family]
    return encode_goal_ref(family, tags, zlib.crc32(target.encode()) % INSTANCE_MASK + 1)


def _intent(
    identity: RunIdentity, priority: int, payload: dict[str, Any], goal_ref: int = 0
) -> action_pb2.ActionIntent:
    return action_pb2.ActionIntent(
        ori_id=identity.ori.ori_id,
        kind=ACTION_KINDS[identity.mode],
        goal_ref=goal_ref,
        priority=priority,
        tier=identity.tier,
        source=action_pb2.ACTION_SOURCE_COGNITION,
        payload=to_struct(payload),
    )


def _payload(identity: RunIdentity, output_id: str, offline: bool) -> dict[str, Any]:
    return {
        "mode": identity.mode,
        "run_id": identity.run_id,
        "request_id": identity.request_id,
        "output_id": output_id,
        "offline": offline,
    }


def action_for(
    identity: RunIdentity, dispatched: Dispatched, priority: int, extra: dict[str, Any]
) -> action_pb2.ActionIntent:
    """mode → action: dialogue SAY, decision USE_PROP (with its chosen goal's ref), reflection and
    summary FORM_MEMORY."""
    payload = {
        **_payload(identity, dispatched.output_id, dispatched.response.offline),
        "reply": dispatched.reply.model_dump(mode="json", exclude_none=True),
        **extra,
    }
    reply = dispatched.reply
    goal_ref = (
        goal_ref_for(reply.goal, reply.target) if isinstance(reply, DecisionReply) and reply.goal else 0
    )
    return _intent(identity, priority, payload, goal_ref)


def template_say(
    identity: RunIdentity, priority: int, reason: str, offline: bool, extra: dict[str, Any]
) -> action_pb2.ActionIntent:
    """The SAY of a dialogue that fell back: the player is answered with the labelled template line."""
    return _intent(identity, priority, {**_payload(identity, "", offline), "fallback": reason, **extra})


def event_for(
    identity: RunIdentity, dispatched: Dispatched, decision: policy_pb2.GateResponse, scene: Scene
) -> biography_pb2.NewOriEvent:
    """MemoryFormed (or Reflected for a reflection) carrying its provenance bundle."""
    text, salience = memory_text(dispatched.reply, scene)
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


def speech(scene: Scene, text: str, locale: str, heard_tick: int, source: str) -> dict[str, Any]:
    """The speech block of a SAY payload: the line, whom it answers and what it answers."""
    return {
        "text": text,
        "locale": locale,
        "addressed_to": scene.addressed_to,
        "addressed_name": scene.addressed_name or scene.addressed_to,
        "heard": scene.heard,
        "heard_tick": heard_tick,
        "source": source,
    }


def append_request(
    identity: RunIdentity, events: list[biography_pb2.NewOriEvent]
) -> biography_pb2.AppendRequest:
    """One atomic append: either every event of the run is recorded or none is."""
    return biography_pb2.AppendRequest(
        ori_id=identity.ori.ori_id,
        expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
        events=events,
    )
