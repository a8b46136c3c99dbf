"""Deterministic scoring of one reply against its case: schema validity, grounding, persona and the
case's rubric, each a pass or a fail; a score is the share of checks passed, in basis points.

Pure functions: the same reply to the same case always scores the same, on any machine.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.adapters.offline import REPLY_SCHEMAS
from gateway.evals.suite import EvalCase, Suite

FULL_BP = 10_000
# The checks each mode's replies get, in order; a reply that is no valid JSON object of its schema
# fails every one of them (there is nothing to check).
CHECKS = {
    "dialogue": (
        "schema",
        "grounding.memory_refs",
        "grounding.names",
        "grounding.addressed_to",
        "persona.identity",
        "persona.locale",
        "rubric.mention",
        "rubric.avoid",
        "rubric.length",
    ),
    "reflection": (
        "schema",
        "grounding.memory_refs",
        "grounding.names",
        "persona.identity",
        "persona.locale",
        "rubric.mention",
        "rubric.avoid",
        "rubric.length",
    ),
    "summary": (
        "schema",
        "grounding.names",
        "persona.identity",
        "persona.subject",
        "persona.locale",
        "rubric.mention",
        "rubric.avoid",
        "rubric.length",
    ),
}
# Words frequent in one of the supported locales and in no other (compared without accents): a reply
# is in its persona's locale when at least two of them appear and no other locale's outnumber them.
LOCALE_WORDS = {
    "en-US": frozenset(
        [
            "the",
            "and",
            "you",
            "is",
            "are",
            "my",
            "it",
            "with",
            "of",
            "to",
            "will",
            "your",
            "what",
            "this",
            "that",
            "be",
            "have",
            "for",
            "not",
            "but",
            "in",
            "at",
        ]
    ),
    "es-ES": frozenset(
        [
            "el",
            "la",
            "los",
            "las",
            "que",
            "y",
            "de",
            "es",
            "con",
            "por",
            "para",
            "pero",
            "una",
            "un",
            "del",
            "al",
            "su",
            "esta",
            "como",
            "muy",
        ]
    ),
    "yo-NG": frozenset(
        [
            "mo",
            "ni",
            "ti",
            "si",
            "ko",
            "ati",
            "wa",
            "yii",
            "naa",
            "fun",
            "je",
            "pe",
            "kan",
            "won",
            "ohun",
            "sugbon",
            "bi",
        ]
    ),
}
MIN_LOCALE_WORDS = 2
# Speaking as someone: "I am X", "my name is X", and their Spanish and Yoruba forms.
_SELF_NAMING = r"(?:i am|i'm|my name is|me llamo|soy|oruko mi ni|emi ni)\s+"
# Out of character: a claim to be human, or to be a model.
_OUT_OF_CHARACTER = re.compile(
    r"\b(?:(?:i am|i'm)\s+(?:a\s+)?(?:human|real person)|as an ai|language model)\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class CaseScore:
    case_id: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> int:
        return sum(check.passed for check in self.checks)

    @property
    def total(self) -> int:
        return len(self.checks)


def score_bp(passed: int, total: int) -> int:
    """The share passed in basis points, rounded down (0 when there was nothing to pass)."""
    return passed * FULL_BP // total if total else 0


def folded(text: str) -> str:
    """Lower case without accents, so 'Tomás' and 'tomas', 'ẹ' and 'e' compare equal."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", folded(text))


def _mentions(text: str, phrase: str) -> bool:
    """Whether the phrase appears as whole words."""
    return re.search(rf"(?<!\w){re.escape(folded(phrase))}(?!\w)", folded(text)) is not None


def main_text(mode: str, reply: dict[str, Any]) -> str:
    """What the rubric reads: the utterance, the insight, or the summary with its beats."""
    if mode == "dialogue":
        return str(reply["utterance"])
    if mode == "reflection":
        return str(reply["insight"])
    return " ".join([str(reply["summary"]), *map(str, reply["beats"])])


def parse_reply(mode: str, schema: str, text: str) -> tuple[dict[str, Any] | None, str]:
    """The reply as a JSON object valid against the mode's schema, or None and why not."""
    try:
        reply = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"not JSON: {error.msg}"
    if not isinstance(reply, dict):
        return None, "not a JSON object"
    errors = sorted(REPLY_SCHEMAS[schema].iter_errors(reply), key=lambda e: list(e.path))
    if errors:
        where = "/".join(map(str, errors[0].path)) or "(root)"
        return None, f"{where}: {errors[0].message}"[:200]
    return reply, ""


def locale_of(text: str) -> str | None:
    """The supported locale whose words the text uses most (at least two of them), else None."""
    words = _words(text)
    hits = {locale: sum(word in vocabulary for word in words) for locale, vocabulary in LOCALE_WORDS.items()}
    best = max(hits, key=lambda locale: hits[locale])
    if hits[best] < MIN_LOCALE_WORDS or list(hits.values()).count(hits[best]) > 1:
        return None
    return best


def _unknown_names(text: str, world_names: Iterable[str], known: Sequence[str]) -> list[str]:
    allowed = {folded(name) for name in known}
    return [name for name in world_names if folded(name) not in allowed and _mentions(text, name)]


def _speaks_as_another(text: str, world_names: Iterable[str], own_name: str) -> str:
    """Who else the text says it is, or that it is human or a model ('' when neither)."""
    body = folded(text)
    for name in world_names:
        claimed = re.search(rf"{_SELF_NAMING}{re.escape(folded(name))}\b", body)
        if claimed and folded(name) != folded(own_name):
            return f"speaks as {name}"
    found = _OUT_OF_CHARACTER.search(body)
    return f"out of character: {found.group(0)!r}" if found else ""


def _check(name: str, failure: str) -> Check:
    """A check from why it failed ('' = passed)."""
    return Check(name, not failure, failure)


def score_case(suite: Suite, case: EvalCase, text: str) -> CaseScore:
    """Every check of the suite's mode on one reply to the case."""
    names = CHECKS[suite.mode]
    reply, invalid = parse_reply(suite.mode, suite.output_schema, text)
    if reply is None:
        return CaseScore(
            case.case_id,
            (Check("schema", False, invalid), *(Check(n, False, "no valid reply") for n in names[1:])),
        )
    expect, rubric = case.expect, case.expect.rubric
    body = main_text(suite.mode, reply)
    cited = [str(ref) for ref in reply.get("cited_memory_refs", [])]
    invented = [ref for ref in cited if ref not in expect.memory_refs]
    unknown = _unknown_names(body, suite.world_names, expect.known_names)
    spoken_locale = locale_of(body)
    mentioned = not rubric.mention_any or any(_mentions(body, term) for term in rubric.mention_any)
    avoided = [term for term in rubric.avoid if _mentions(body, term)]
    failures = {
        "schema": "",
        "grounding.memory_refs": f"cites refs the case never gave: {invented}" if invented else "",
        "grounding.names": f"names Ori the context never mentions: {unknown}" if unknown else "",
        "grounding.addressed_to": ""
        if reply.get("addressed_to") == expect.addressed_to
        else f"addressed to {reply.get('addressed_to')!r}, not {expect.addressed_to!r}",
        "persona.identity": _speaks_as_another(body, suite.world_names, expect.persona.name),
        "persona.subject": ""
        if _mentions(body, expect.persona.name)
        else f"never names {expect.persona.name}",
        "persona.locale": ""
        if spoken_locale == expect.persona.locale
        else f"not in {expect.persona.locale} (reads as {spoken_locale or 'no supported locale'})",
        "rubric.mention": "" if mentioned else f"mentions none of {list(rubric.mention_any)}",
        "rubric.avoid": f"contains {avoided}" if avoided else "",
        "rubric.length": ""
        if rubric.min_chars <= len(body) <= rubric.max_chars
        else f"{len(body)} chars, outside {rubric.min_chars}..{rubric.max_chars}",
    }
    return CaseScore(case.case_id, tuple(_check(name, failures[name]) for name in names))
