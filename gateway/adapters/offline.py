"""The offline adapter: a deterministic, schema-valid reply built from the prompt, always labelled offline.

It reads the context the cognition service put in the prompt (the top objective, the most salient
memory, the addressed speaker) so the pipeline and the demo run without a network. Nothing it writes
can pass for a model's: every text field starts with OFFLINE_LABEL and every reply is `offline=True`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from cognition_service.output_schemas import (
    OUTPUT_SCHEMAS,
    ChosenGoal,
    DecisionReply,
    DialogueReply,
    OutputSchemaName,
    ReflectionReply,
    SummaryReply,
)
from gateway.adapters.base import ModelReply, ModelRequest
from gateway.cost import Usage, estimate_tokens
from kernel_service.behavior.htn import FamilyName
from services.errors import InvalidArgument, ResourceExhausted

OFFLINE_LABEL = "[offline]"
OFFLINE_MODEL_REF = "offline:deterministic-v1"
MODE_SCHEMAS = {
    "dialogue": OutputSchemaName.DIALOGUE,
    "decision": OutputSchemaName.DECISION,
    "reflection": OutputSchemaName.REFLECTION,
    "summary": OutputSchemaName.SUMMARY,
}
EMOTIONS = ("calm", "curious", "warm", "wary", "hopeful", "tired")
_REF = re.compile(r"^\s*\[([A-Za-z0-9:_./#-]{1,128})\]\s*(.*)$", re.DOTALL)
_SAID_BY = re.compile(r"^\s*([^:\n]{1,40}?)\s*:\s*\S")
# Words of an objective that name the goal family a decision serves (first match wins); anything
# else is the Ori's vocation (mending a net or repairing a mill is work). An apology, amends or a
# reconciliation names the relationship-repair tag too.
_FAMILY_WORDS = (
    (FamilyName.SOCIAL, re.compile(r"\b(talk|friend|apolog|amends|reconcil|visit|comfort|thank)", re.I)),
    (FamilyName.SELF_CARE, re.compile(r"\b(rest|sleep|eat|heal|recover)", re.I)),
    (FamilyName.TRAVEL, re.compile(r"\b(travel|journey|walk to|go to|return to|reach)", re.I)),
)
_REPAIR_WORDS = re.compile(r"\b(apolog|amends|reconcil)", re.I)
_KEYED = re.compile(
    r"^\s*(top[ _]objective|objective|speaker|addressed[ _]speaker|addressed[ _]to|memory)\s*:\s*(.+)$", re.I
)


@dataclass(frozen=True)
class PromptContext:
    """What the offline adapter found in the prompt; defaults where the prompt said nothing."""

    objective: str = "get through the day"
    memory_ref: str | None = None
    memory_text: str = ""
    speaker: str = "someone nearby"


def _from_json(content: str) -> dict[str, str]:
    if not content.lstrip().startswith("{"):  # (only an object names anything: skip parsing the rest)
        return {}
    try:
        value = json.loads(content)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    found: dict[str, str] = {}
    objectives = value.get("top_objective") or value.get("objective") or value.get("objectives")
    if isinstance(objectives, list) and objectives:
        objectives = objectives[0]
    if isinstance(objectives, dict):
        objectives = objectives.get("text") or objectives.get("title")
    if isinstance(objectives, str):
        found["objective"] = objectives
    speaker = value.get("addressed_speaker") or value.get("speaker") or value.get("addressed_to")
    if isinstance(speaker, str):
        found["speaker"] = speaker
    memories = value.get("memories") or value.get("memory")
    first = memories[0] if isinstance(memories, list) and memories else memories
    if isinstance(first, dict):
        if isinstance(first.get("ref"), str):
            found["memory_ref"] = first["ref"]
        if isinstance(first.get("text"), str):
            found["memory"] = first["text"]
    elif isinstance(first, str):
        found["memory"] = first
    return found


def _from_lines(content: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in content.splitlines():
        match = _KEYED.match(line)
        if match:
            key = match.group(1).lower().replace(" ", "_")
            key = {
                "top_objective": "objective",
                "addressed_speaker": "speaker",
                "addressed_to": "speaker",
            }.get(key, key)
            found.setdefault(key, match.group(2).strip())
    return found


def read_context(request: ModelRequest) -> PromptContext:
    """The first objective, memory and speaker the prompt names, zone by zone, JSON or `key: value`."""
    found: dict[str, str] = {}
    for text in [request.task_instruction, *(p.content for p in request.untrusted)]:
        for key, value in {**_from_lines(text), **_from_json(text)}.items():
            if " ".join(value.split()):
                found.setdefault(key, value)
    for part in request.untrusted:
        lines = [line for line in part.content.splitlines() if line.strip()]
        if part.kind == "RECALLED_MEMORY" and "memory" not in found and lines:
            found["memory"] = lines[0]  # memories arrive most salient first, one a line
        if part.kind == "STEWARD_INPUT" and "speaker" not in found and lines:
            said = _SAID_BY.match(lines[0])  # a stimulus quoted as "Name: line"
            if said:
                found["speaker"] = said.group(1)
    memory = found.get("memory", "")
    match = _REF.match(memory)
    if match and "memory_ref" not in found:
        found["memory_ref"], memory = match.group(1), match.group(2)
    return PromptContext(
        objective=_clip(found.get("objective", PromptContext.objective), 160),
        memory_ref=found.get("memory_ref"),
        memory_text=_clip(memory, 160),
        speaker=_clip(found.get("speaker", PromptContext.speaker), 128),
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _goal_for(objective: str) -> ChosenGoal:
    """The structured goal the objective names, so the kernel's HTN can pursue the decision."""
    family = next((family for family, words in _FAMILY_WORDS if words.search(objective)), FamilyName.VOCATION)
    tags = ["relationship-repair"] if family is FamilyName.SOCIAL and _REPAIR_WORDS.search(objective) else []
    return ChosenGoal.model_validate({"family": family, "tags": tags})


def _reply_for(schema: OutputSchemaName, context: PromptContext, seed: int) -> str:
    refs = [context.memory_ref] if context.memory_ref else []
    remembered = f" I remember {context.memory_text}." if context.memory_text else ""
    reply: DialogueReply | DecisionReply | ReflectionReply | SummaryReply
    if schema is OutputSchemaName.DIALOGUE:
        reply = DialogueReply(
            utterance=f"{OFFLINE_LABEL} {context.speaker}, I am trying to {context.objective}.{remembered}",
            addressed_to=context.speaker[:128],
            emotion=EMOTIONS[seed % len(EMOTIONS)],
            cited_memory_refs=refs,
        )
    elif schema is OutputSchemaName.DECISION:
        reply = DecisionReply(
            action="pursue_objective",
            target=_clip(context.objective, 128),
            rationale=f"{OFFLINE_LABEL} The top objective is to {context.objective}.{remembered}",
            goal=_goal_for(context.objective),
            cited_memory_refs=refs,
        )
    elif schema is OutputSchemaName.REFLECTION:
        reply = ReflectionReply(
            insight=f"{OFFLINE_LABEL} What matters now is to {context.objective}.{remembered}",
            salience_bp=5_000 + seed % 5_000,
            cited_memory_refs=refs,
        )
    else:
        reply = SummaryReply(
            summary=f"{OFFLINE_LABEL} A quiet day spent working to {context.objective}.",
            beats=[f"{OFFLINE_LABEL} Worked toward: {context.objective}."]
            + ([f"{OFFLINE_LABEL} Recalled: {context.memory_text}"] if context.memory_text else []),
        )
    return reply.model_dump_json(exclude_none=True)


def schema_for(request: ModelRequest) -> OutputSchemaName:
    """The output schema named by the request, else the one of its mode."""
    if request.output_schema:
        try:
            return OutputSchemaName(request.output_schema)
        except ValueError:
            names = ", ".join(s.value for s in OUTPUT_SCHEMAS)
            raise InvalidArgument.field("output_schema", f"unknown schema; expected one of {names}") from None
    try:
        return MODE_SCHEMAS[request.mode]
    except KeyError:
        raise InvalidArgument.field("mode", "must name a cognition mode") from None


class OfflineAdapter:
    """Deterministic stand-in for a model: same prompt, same reply, same usage."""

    name = OFFLINE_MODEL_REF
    offline = True

    async def count_input_tokens(self, request: ModelRequest) -> int:
        return estimate_tokens(request.prompt_text())

    async def generate(self, request: ModelRequest) -> ModelReply:
        schema = schema_for(request)
        prompt = request.prompt_text()
        seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")
        text = _reply_for(schema, read_context(request), seed)
        usage = Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text))
        if usage.output_tokens > request.max_output_tokens:
            raise ResourceExhausted(
                f"max_output_tokens {request.max_output_tokens} is below the offline reply's "
                f"{usage.output_tokens} tokens",
                metadata={"limit": "max_output_tokens"},
            )
        return ModelReply(text=text, usage=usage, offline=True)

    async def close(self) -> None:
        return None
