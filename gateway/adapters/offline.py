"""The offline adapter: a deterministic, schema-valid reply in the Ori's voice, always labelled offline.

So the pipeline and the demo run without a network and still sound like someone. It reads the zones
the cognition service writes (cognition_service/zoning.py): the identity lines (`name:`,
`vocation:`), the first quirk, value and relationship, the line the Ori heard (`<name> (<id>) says:`),
the crossroads and its options, the top objective, the place and the emotion; it writes from them with
a small template grammar whose choices come from the SHA-256 of the prompt, so the reply varies with
the call. It cites a recalled memory by ref and never quotes a memory's text. Nothing it writes can
pass for a model's: every text field starts with OFFLINE_LABEL and every reply is `offline=True`.

It knows cognition's replies only through the protocol: the JSON Schema published for each output
schema name (egbe/v1/schemas/<name>.json), against which every reply it builds is checked.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.cost import Usage, estimate_tokens
from services.errors import InvalidArgument, ResourceExhausted

OFFLINE_LABEL = "[offline]"
OFFLINE_MODEL_REF = "offline:deterministic-v1"
# The published reply contract, by output schema name ("egbe.cognition.dialogue.v1").
REPLY_SCHEMAS: dict[str, Draft202012Validator] = {
    entry.name.removesuffix(".json"): Draft202012Validator(json.loads(entry.read_text(encoding="utf-8")))
    for entry in sorted(resources.files("egbe.v1").joinpath("schemas").iterdir(), key=lambda e: e.name)
    if entry.name.endswith(".json")
}
MODE_SCHEMAS = {
    mode: f"egbe.cognition.{mode}.v1" for mode in ("dialogue", "decision", "reflection", "summary")
}
EMOTIONS = ("calm", "curious", "warm", "wary", "hopeful", "tired")
DEFAULT_OBJECTIVE = "get through the day"
# A ranked item as zoning writes it: "[ref] text".
_ITEM = re.compile(r"^\[([A-Za-z0-9:_./#-]{1,128})\]\s*(.*)$")
_SECTION = re.compile(r"^(traits|values|quirks|perception|relationships|objectives):$")
_KEYED = re.compile(
    r"^(name|vocation|home|top objective|place|emotion|needs now|irreversible action|speaker|option \d+"
    r"|crossroads[^:]*)\s*:\s*(.+)$",
    re.I,
)
_HEARD = re.compile(r"^(.{1,128}?) \(([^()\n]{0,128})\) says: (.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_VOCATIVE = re.compile(r"^\s*[A-Z][\w'-]*,\s+")  # "Adaeze, can you…": the name the speaker called
_NEED = re.compile(r"^(.{1,40}?) (\d{1,3})%$")
_PERCENT = re.compile(r"\s*\([+-]?\d+%\)$")
_RELATION = re.compile(r"^([^(:]+?)\s*\(([^,)]+)")
_CHOICE = re.compile(r":\s*(.+?)\s+or\s+(.+?)[.?!]*$", re.I)
_WHETHER = re.compile(r"\bwhether (?:to )?(.+?)[.?!]*$", re.I)
# Words of an objective that name the goal family a decision serves (first match wins); anything
# else is the Ori's vocation (mending a net or repairing a mill is work). An apology, amends or a
# reconciliation names the relationship-repair tag too.
_FAMILY_WORDS = (
    ("social", re.compile(r"\b(talk|friend|apolog|amends|reconcil|visit|comfort|thank)", re.I)),
    ("self-care", re.compile(r"\b(rest|sleep|eat|heal|recover|food|drink)", re.I)),
    ("travel", re.compile(r"\b(travel|journey|walk to|go to|return to|reach|follow)", re.I)),
)
_REPAIR_WORDS = re.compile(r"\b(apolog|amends|reconcil)", re.I)


@dataclass(frozen=True)
class PromptContext:
    """What the offline adapter found in the prompt's zones; empty where the prompt said nothing."""

    name: str = ""
    vocation: str = ""
    quirk: str = ""
    value: str = ""
    relation: str = ""
    relation_kind: str = ""
    speaker: str = ""
    speaker_id: str = ""
    heard: str = ""
    objective: str = DEFAULT_OBJECTIVE
    crossroads: str = ""
    options: tuple[str, ...] = ()
    irreversible: str = ""
    place: str = ""
    emotion: str = ""
    need: str = ""
    memory_ref: str | None = None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _zone_fields(content: str, found: dict[str, str], options: list[str]) -> None:
    """Keyed lines and the first item of each persona/context section, first mention wins."""
    section = ""
    for raw in content.splitlines():
        line = raw.strip()
        if not line:
            continue
        if header := _SECTION.match(line):
            section = header.group(1)
            continue
        item = _ITEM.match(line)
        text = item.group(2) if item else line
        if item and section in ("quirks", "values", "relationships"):
            found.setdefault(section, text)
        if heard := _HEARD.match(text):
            found.setdefault("heard_name", heard.group(1))
            found.setdefault("heard_id", heard.group(2))
            found.setdefault("heard", heard.group(3))
            continue
        if keyed := _KEYED.match(text):
            key, value = keyed.group(1).lower(), keyed.group(2).strip()
            if key.startswith("option "):
                options.append(value)
            elif key.startswith("crossroads"):
                found.setdefault("crossroads", value)
            elif value:
                found.setdefault(key, value)


def _options_from(prompt: str) -> tuple[str, ...]:
    """A crossroads sent without options: "…: A or B." gives A and B; "whether to X" gives X or not."""
    if choice := _CHOICE.search(prompt):
        return choice.group(1), choice.group(2)
    if whether := _WHETHER.search(prompt):
        return whether.group(1), "leave things as they are"
    return ()


def _pressing(needs: str) -> str:
    """The most pressing need of a "needs now: safety 10%, company 40%, …" line, as "company at 40%"."""
    levels = [m.groups() for part in needs.split(",") if (m := _NEED.match(part.strip()))]
    if not levels:
        return ""
    name, level = max(levels, key=lambda level: int(level[1]))
    return _clip(f"{name} at {level}%", 64)


def read_context(request: ModelRequest) -> PromptContext:
    """What the zones say, zone by zone; the recalled memory gives only its ref, never its text."""
    found: dict[str, str] = {}
    options: list[str] = []
    for text in [request.task_instruction, *(p.content for p in request.untrusted)]:
        _zone_fields(text, found, options)
    memory_ref = None
    for part in request.untrusted:
        first_line = part.content.lstrip().split("\n", 1)[0]
        if part.kind == "RECALLED_MEMORY" and (item := _ITEM.match(first_line)):
            memory_ref = item.group(1)  # memories arrive most salient first, one a line
    relation = _RELATION.match(found.get("relationships", ""))
    crossroads = found.get("crossroads", "")
    return PromptContext(
        name=_clip(found.get("name", ""), 128),
        vocation=_clip(found.get("vocation", ""), 64),
        quirk=_clip(found.get("quirks", ""), 120),
        value=_clip(_PERCENT.sub("", found.get("values", "")), 64),
        relation=_clip(relation.group(1), 64) if relation else "",
        relation_kind=_clip(relation.group(2), 32) if relation else "",
        speaker=_clip(found.get("heard_name", "") or found.get("speaker", ""), 128),
        speaker_id=_clip(found.get("heard_id", "") or found.get("speaker", ""), 128),
        heard=_clip(found.get("heard", ""), 240),
        objective=_clip(found.get("top objective", "") or DEFAULT_OBJECTIVE, 128),
        crossroads=_clip(crossroads, 240),
        options=tuple(_clip(o, 128) for o in options or _options_from(crossroads) if o.strip()),
        irreversible=_clip(found.get("irreversible action", ""), 160),
        place=_clip(found.get("place", ""), 64),
        emotion=_clip(found.get("emotion", ""), 32),
        need=_pressing(found.get("needs now", "")),
        memory_ref=memory_ref,
    )


class Voice:
    """Template choices drawn from the prompt's hash: each slot takes the next bits, so the same prompt
    always picks the same words and a different prompt usually does not."""

    def __init__(self, prompt: str) -> None:
        self._bits = int.from_bytes(hashlib.sha256(prompt.encode()).digest(), "big")

    def pick(self, choices: Sequence[str], **slots: str) -> str:
        self._bits, index = divmod(self._bits, len(choices))
        return choices[index].format(**slots)

    def number(self, modulus: int) -> int:
        self._bits, value = divmod(self._bits, modulus)
        return value


def _topic(heard: str) -> str:
    """What the speaker asked about, in their words: their last sentence, without its end mark."""
    sentences = [s for s in _SENTENCE_END.split(heard) if s.strip()]
    last = _VOCATIVE.sub("", sentences[-1] if sentences else heard)
    return last.rstrip(" .?!").strip()


def _who(context: PromptContext) -> str:
    return context.name or "I"


def _self_line(voice: Voice, context: PromptContext) -> str:
    """One sentence of who the Ori is: its work, a quirk, someone it knows or what it values."""
    options = []
    if context.vocation:
        options += [
            "My work as {article} {vocation} comes first, always.",
            "I am {article} {vocation}; that is how I see it.",
            "Ask any {vocation} and they will tell you the same.",
        ]
    if context.quirk:
        options += ["They say I am the one who {quirk}.", "You know me: the one who {quirk}."]
    if context.relation:
        options += ["{relation} would tell you the same.", "I will talk it over with {relation} first."]
    if context.value:
        options += [
            "I hold {value} dear, so I speak plainly.",
            "{Value} matters to me more than most things.",
        ]
    options = options or ["I am still finding my feet here."]
    article = "an" if context.vocation[:1].lower() in "aeiou" else "a"
    return voice.pick(
        options,
        article=article,
        vocation=context.vocation,
        quirk=context.quirk,
        relation=context.relation,
        value=context.value,
        Value=context.value[:1].upper() + context.value[1:],
    )


def _scene_line(voice: Voice, context: PromptContext) -> str:
    options = ["Let me finish what is in my hands first.", "Ask me again before dusk."]
    if context.place:
        options += ["Come by {place} later.", "You will find me at {place}."]
    if context.emotion:
        options += ["I feel {emotion} today, but I will answer you properly.", "Forgive me, I am {emotion}."]
    return voice.pick(options, place=context.place, emotion=context.emotion)


def _need_line(voice: Voice, context: PromptContext) -> str:
    if not context.need:
        return voice.pick(["Nothing else presses on me.", "I want for nothing just now."])
    return voice.pick(
        [
            "My need for {need} is on my mind.",
            "I feel my need for {need}.",
            "Still, {need}, my need nags at me.",
        ],
        need=context.need,
    )


Reply = dict[str, Any]


def _dialogue(voice: Voice, context: PromptContext) -> Reply:
    speaker = context.speaker or "friend"
    if context.heard:
        topic = _topic(context.heard)
        opening = voice.pick(
            [
                "{speaker}, you ask me: {topic}?",
                "I hear you, {speaker}. {Topic}?",
                "{speaker}, you want to know: {topic}?",
                "So, {speaker}: {topic}?",
            ],
            speaker=speaker,
            topic=topic[:1].lower() + topic[1:],
            Topic=topic[:1].upper() + topic[1:],
        )
        answer = voice.pick(
            [
                "Yes, I will see to it.",
                "I think so, if the day allows.",
                "Not today, but soon.",
                "Give me time and it will be done.",
                "I cannot promise, but I will try.",
            ]
        )
    else:
        opening = voice.pick(
            ["Good day, {speaker}.", "{speaker}, there you are.", "Well met, {speaker}."], speaker=speaker
        )
        answer = voice.pick(["What brings you here?", "Is something the matter?", "Walk with me a while."])
    utterance = " ".join(
        [OFFLINE_LABEL, opening, answer, _self_line(voice, context), _scene_line(voice, context)]
    )
    return {
        "utterance": _clip(utterance, 600),
        "addressed_to": (context.speaker_id or speaker)[:128],
        "emotion": context.emotion or voice.pick(EMOTIONS),
        "cited_memory_refs": [context.memory_ref] if context.memory_ref else [],
        "claims": [],
        "claimed_capabilities": [],
    }


def _goal_for(objective: str) -> Reply:
    """The structured goal the objective names (protocol family and tag names), so the kernel's
    HTN can pursue the decision."""
    family = next((family for family, words in _FAMILY_WORDS if words.search(objective)), "vocation")
    tags = ["relationship-repair"] if family == "social" and _REPAIR_WORDS.search(objective) else []
    return {"family": family, "tags": tags}


def _choose(voice: Voice, context: PromptContext) -> tuple[int, str]:
    """The option the Ori takes and why: the one naming someone it is related to, else the one its
    work or first value points at, else the hash decides (and its values give the reason)."""
    options = context.options
    lowered = [o.lower() for o in options]
    for needle, reason in (
        (context.relation, f"{context.relation} ({context.relation_kind}) matters to me"),
        (context.vocation, f"my work as {context.vocation} is what I am for"),
        (context.value, f"I hold {context.value} above the rest"),
    ):
        if needle:
            named = [i for i, option in enumerate(lowered) if needle.lower() in option]
            if named:
                return named[0], reason
    reason = f"I hold {context.value} above the rest" if context.value else "it sits right with me"
    return voice.number(len(options)), reason


def _decision(voice: Voice, context: PromptContext) -> Reply:
    who = _who(context)
    if context.options:
        index, why = _choose(voice, context)
        target = context.options[index]
        ordinal = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")[index]
        rationale = voice.pick(
            [
                "{who} takes the {ordinal} way, because {why}.",
                "Of the ways open to {who}, the {ordinal} one: {why}.",
                "{who} weighs it and chooses the {ordinal}: {why}.",
            ],
            who=who,
            ordinal=ordinal,
            why=why,
        )
        action, goal_words = "choose", target
    elif context.irreversible:
        target = "the irreversible action"
        rationale = voice.pick(
            [
                "{who} must act before it cannot be undone.",
                "Once it is done there is no going back, so {who} steps in now.",
                "{who} will not stand by while it happens.",
            ],
            who=who,
        )
        action, goal_words = "respond", context.objective
    else:
        target = context.objective
        rationale = voice.pick(
            [
                "{who} keeps to what matters most right now.",
                "It is the next thing that needs doing, and {who} does it.",
                "{who} sees no better use of the hour.",
                "Nothing presses harder on {who} just now.",
                "{who} puts this first for now.",
                "This is where {who} is needed.",
            ],
            who=who,
        )
        action, goal_words = "pursue_objective", context.objective
    rationale = " ".join(
        [
            OFFLINE_LABEL,
            rationale,
            _self_line(voice, context),
            _need_line(voice, context),
            _scene_line(voice, context),
        ]
    )
    return {
        "action": action,
        "target": _clip(target, 128),
        "rationale": _clip(rationale, 600),
        "goal": _goal_for(goal_words),
        "cited_memory_refs": [context.memory_ref] if context.memory_ref else [],
        "claimed_capabilities": [],
    }


def _reflection(voice: Voice, context: PromptContext) -> Reply:
    insight = voice.pick(
        [
            "{who} thinks the day has asked a lot.",
            "{who} notices how quickly the hours go.",
            "{who} wonders what tomorrow will bring.",
            "{who} feels the weight of small things today.",
            "{who} is grateful for the quiet moments.",
        ],
        who=_who(context),
    )
    parts = [insight, _self_line(voice, context), _need_line(voice, context), _scene_line(voice, context)]
    text = " ".join([OFFLINE_LABEL, *parts])
    return {
        "insight": _clip(text, 600),
        "salience_bp": 3_000 + voice.number(5_000),
        "cited_memory_refs": [context.memory_ref] if context.memory_ref else [],
    }


def _summary(voice: Voice, context: PromptContext) -> Reply:
    who = _who(context)
    summary = voice.pick(
        ["{who} had a steady day.", "{who} had a full day.", "{who} had a quiet day."], who=who
    )
    beats = [
        voice.pick(["Morning: the usual work.", "Morning: an early start.", "Morning: slow going."]),
        voice.pick(["Evening: rest at last.", "Evening: a meal and bed.", "Evening: talk by the fire."]),
    ]
    return {
        "summary": _clip(" ".join([OFFLINE_LABEL, summary, _self_line(voice, context)]), 600),
        "beats": [f"{OFFLINE_LABEL} {beat}" for beat in beats],
    }


# Each reply by the schema name of its mode.
_BUILDERS: dict[str, Callable[[Voice, PromptContext], Reply]] = {
    MODE_SCHEMAS["dialogue"]: _dialogue,
    MODE_SCHEMAS["decision"]: _decision,
    MODE_SCHEMAS["reflection"]: _reflection,
    MODE_SCHEMAS["summary"]: _summary,
}


def _reply_for(schema: str, context: PromptContext, voice: Voice) -> str:
    """The reply as compact JSON, checked against its published schema (a failure is a bug here)."""
    reply = _BUILDERS[schema](voice, context)
    REPLY_SCHEMAS[schema].validate(reply)
    return json.dumps(reply, ensure_ascii=False, separators=(",", ":"))


def schema_for(request: ModelRequest) -> str:
    """The output schema named by the request, else the one of its mode."""
    if request.output_schema:
        if request.output_schema not in _BUILDERS:
            names = ", ".join(_BUILDERS)
            raise InvalidArgument.field("output_schema", f"unknown schema; expected one of {names}")
        return request.output_schema
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
        text = _reply_for(schema, read_context(request), Voice(prompt))
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
