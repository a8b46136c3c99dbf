"""What a run's prompts must show of each Ori's mind: who it is, what it was told, whom it knows.

Shared by the end-to-end tests of the hamlet scenario through the offline adapter and through the
real Anthropic SDK against a local fake of the Messages API. Prompts are read where they arrive:
the fake's recorded HTTP requests, and the gateway's audit log (the prompt it handed the adapter).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from egbe.v1 import gateway_pb2
from world.scenario import OriSpec, Scenario

MAX_LINE_TO_CALL_TICKS = 200
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Fragments shorter than this (a bracket, "values:", a lone number) are layout, not sentences.
_MIN_SENTENCE_CHARS = 16
_SCHEMA_MODES = {
    "DialogueReply": "dialogue",
    "DecisionReply": "decision",
    "ReflectionReply": "reflection",
    "SummaryReply": "summary",
}


@dataclass(frozen=True)
class Prompt:
    """One model call's whole prompt as text, its mode and (from the audit) the tick it was issued."""

    text: str
    mode: str
    tick: int | None = None


def prompt_from_audit(record: gateway_pb2.AuditRecord) -> Prompt:
    context: dict[str, Any] = json_format.MessageToDict(record.input_context)
    parts = [
        context.get("system_policy", ""),
        *context.get("tool_grants", []),
        context.get("task_instruction", ""),
    ]
    parts += [zone.get("content", "") for zone in context.get("untrusted", [])]
    tick = int(record.kernel_call_id.split(":")[1]) if record.kernel_call_id else None
    return Prompt("\n\n".join(parts), str(context.get("mode", "")), tick)


def prompt_from_request(params: dict[str, Any]) -> Prompt:
    """A Messages API request as the fake received it: system blocks and the user message."""
    system = params.get("system", "")
    parts = [b["text"] for b in system] if isinstance(system, list) else [system]
    for message in params.get("messages", []):
        content = message["content"]
        parts += [content] if isinstance(content, str) else [b.get("text", "") for b in content]
    text = "\n\n".join(parts)
    return Prompt(text, mode_of(text))


def mode_of(text: str) -> str:
    """The mode a prompt asks for, read from the output schema's title in its task instruction."""
    for title, mode in _SCHEMA_MODES.items():
        if f'"title": "{title}"' in text:
            return mode
    return ""


def ori_named(prompt: Prompt, scenario: Scenario) -> list[OriSpec]:
    """The authored Ori whose identity line ("name: <display name>") the prompt carries."""
    return [ori for ori in scenario.ori if re.search(rf"^name: {re.escape(ori.name)}$", prompt.text, re.M)]


def repeated_sentences(text: str, times: int = 3) -> list[str]:
    counts = Counter(
        " ".join(s.split()).lower() for s in _SENTENCE.split(text) if len(s.strip()) >= _MIN_SENTENCE_CHARS
    )
    return [sentence for sentence, count in counts.items() if count >= times]


def names_by_id(scenario: Scenario) -> dict[str, str]:
    return {ori.id: ori.name for ori in scenario.ori}


def check_prompts(prompts: list[Prompt], scenario: Scenario) -> list[str]:
    """Every property the prompts must have; the problems found (empty when all hold)."""
    problems: list[str] = []
    names = names_by_id(scenario)
    related = 0
    for index, prompt in enumerate(prompts):
        named = ori_named(prompt, scenario)
        if len(named) != 1:
            problems.append(f"prompt {index} names {len(named)} Ori: {prompt.text[:200]!r}")
            continue
        ori = named[0]
        if not ((ori.vocation and ori.vocation in prompt.text) or any(q in prompt.text for q in ori.quirks)):
            problems.append(f"prompt {index} for {ori.id} carries neither its vocation nor a quirk")
        if any(names[r.with_ori] in prompt.text for r in ori.relationships):
            related += 1
        repeats = repeated_sentences(prompt.text)
        if repeats:
            problems.append(f"prompt {index} for {ori.id} repeats {repeats[0]!r} three times or more")
    if prompts and related * 2 < len(prompts):
        problems.append(f"only {related} of {len(prompts)} prompts name someone the Ori is related to")
    return problems


def check_situations(prompts: list[Prompt], scenario: Scenario) -> list[str]:
    """Each player line reaches a dialogue call of the addressed Ori within 200 ticks; each crossroads
    prompt reaches a call of its Ori."""
    problems: list[str] = []
    names = names_by_id(scenario)
    for address in scenario.player.addresses:
        calls = [
            p
            for p in prompts
            if p.mode == "dialogue"
            and address.line in p.text
            and re.search(rf"^name: {re.escape(names[address.ori])}$", p.text, re.M)
        ]
        timely = [
            p for p in calls if p.tick is None or 0 <= p.tick - address.at_tick <= MAX_LINE_TO_CALL_TICKS
        ]
        if not timely:
            problems.append(
                f"the line to {address.ori} at tick {address.at_tick} reached no dialogue call in time"
            )
    for crossroads in scenario.player.crossroads:
        if not any(
            crossroads.prompt in p.text
            and re.search(rf"^name: {re.escape(names[crossroads.ori])}$", p.text, re.M)
            for p in prompts
        ):
            problems.append(
                f"the crossroads of {crossroads.ori} at tick {crossroads.at_tick} reached no call"
            )
    return problems


# An earlier output's text shorter than this may recur by chance ("I will."); longer, it is an echo.
_MIN_ECHO_CHARS = 24
OFFLINE_LABEL = "[offline]"


def _texts(output: str) -> list[str]:
    """The free-text fields of a reply, without the offline label."""
    try:
        reply = json.loads(output)
    except ValueError:
        return [output]
    values = reply.values() if isinstance(reply, dict) else [reply]
    texts: list[str] = []
    for value in values:
        texts += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
    return [t.removeprefix(OFFLINE_LABEL).strip() for t in texts]


def echoed_outputs(outputs: list[str]) -> list[str]:
    """Outputs that quote an earlier output's text inside their own (a reply remembered, then re-quoted).

    An output equal to an earlier one is a repeat, not an echo: the distinct-output share counts those."""
    seen: set[str] = set()
    echoes = []
    for output in outputs:
        texts = _texts(output)
        if any(earlier in text and earlier != text for text in texts for earlier in seen):
            echoes.append(output)
        seen.update(t for t in texts if len(t) >= _MIN_ECHO_CHARS)
    return echoes


def mind_reply(params: dict[str, Any]) -> str:
    """The fake model's answer: a schema-valid reply for the mode the prompt asks for, in the Ori's voice."""
    prompt = prompt_from_request(params)
    name = re.search(r"^name: (.+)$", prompt.text, re.M)
    who = name.group(1) if name else "an Ori"
    speaker = re.search(r"\((player-\d+)\)", prompt.text)
    reply: dict[str, Any]
    if prompt.mode == "dialogue":
        reply = {
            "utterance": f"This is {who}. I heard you, and I will see to it before dusk.",
            "addressed_to": speaker.group(1) if speaker else "player-1",
            "emotion": "warm",
        }
    elif prompt.mode == "decision":
        reply = {
            "action": "work",
            "target": "the task at hand",
            "rationale": f"{who} keeps to the work of the day.",
        }
    elif prompt.mode == "reflection":
        reply = {"insight": f"{who} notices the day's work going well.", "salience_bp": 5_000}
    else:
        reply = {"summary": f"{who} spent the day at work.", "beats": [f"{who} worked."]}
    return json.dumps(reply)
