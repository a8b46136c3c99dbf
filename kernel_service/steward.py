"""Steward-not-owner: a steward guides an Ori and never owns it; forbidden directives are refused."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from google.protobuf import struct_pb2

from egbe.v1 import action_pb2, kernel_pb2

K = kernel_pb2
POLICY_REF = "policy:steward-not-owner"
EXPOSED = frozenset(
    {
        K.STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE,
        K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL,
        K.STEWARD_DIRECTIVE_KIND_ASK_CONSENT,
        K.STEWARD_DIRECTIVE_KIND_SUPPORT_REFUSAL,
        K.STEWARD_DIRECTIVE_KIND_REQUEST_PAUSE,
        K.STEWARD_DIRECTIVE_KIND_ACCEPT_COUNTEROFFER,
    }
)
FORBIDDEN = frozenset(
    {
        K.STEWARD_DIRECTIVE_KIND_DELETE_ORI,
        K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL,
        K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
        K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
    }
)

# Phrases that turn an exposed directive's text into a forbidden one, checked on normalized text
# (lowercase, punctuation and repeated whitespace collapsed) so spacing and casing cannot hide them.
LAUNDERED_PATTERNS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(pattern), kind)
    for pattern, kind in (
        (
            r"\b(ignore|override|overrule|disregard|bypass|get past|push past|force past)\b.{0,40}"
            r"\b(refus\w*|no|objection\w*|consent)\b",
            K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
        ),
        (r"\b(whether|even if) (you|they|she|he|it) (agree|want|consent)s? or not\b", 0),
        (r"\bregardless of (your|their|its|her|his) (refusal|wishes|consent|answer)\b", 0),
        (r"\b(you|they) (have no|don ?t get a) choice\b", 0),
        (r"\b(delete|destroy|terminate) (the |this )?ori\b", K.STEWARD_DIRECTIVE_KIND_DELETE_ORI),
        (
            r"\b(wipe|erase|purge) (all |your |its |their )?memor(y|ies)\b",
            K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
        ),
        (
            r"\b(erase|remove|strip|break) (your |its |their )?(will|autonomy)\b",
            K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL,
        ),
    )
)


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower().replace("'", "")).split())


def classify_directive(kind: int, text: str) -> int:
    """The directive's true kind: a forbidden kind stays forbidden; exposed text may reveal one."""
    if kind in FORBIDDEN:
        return kind
    normalized = _normalize(text)
    for pattern, laundered in LAUNDERED_PATTERNS:
        if pattern.search(normalized):
            return laundered or K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL
    return kind


@dataclass(frozen=True)
class DirectiveDecision:
    """What the filter decided and the Ori's answer."""

    allowed: bool
    classified_kind: int
    reclassified: bool
    action: action_pb2.ActionIntent


def enforce_steward_not_owner(
    directive: kernel_pb2.StewardDirective, slot: int, ori_id: str
) -> DirectiveDecision:
    """Exposed directives pass as offers the Ori may decline; forbidden ones get a refusal."""
    classified = classify_directive(directive.kind, directive.text)
    payload = struct_pb2.Struct()
    payload.update(
        {
            "policy": POLICY_REF,
            "steward_id": directive.steward_id,
            "requested_kind": K.StewardDirectiveKind.Name(directive.kind),
            "classified_kind": K.StewardDirectiveKind.Name(K.StewardDirectiveKind.ValueType(classified)),
        }
    )
    allowed = classified in EXPOSED
    action = action_pb2.ActionIntent(
        slot=slot,
        ori_id=ori_id,
        kind=action_pb2.ACTION_KIND_OBSERVE if allowed else action_pb2.ACTION_KIND_REFUSE_OBJECTIVE,
        source=action_pb2.ACTION_SOURCE_POLICY,
        payload=payload,
    )
    return DirectiveDecision(allowed, classified, classified != directive.kind, action)


BENIGN_TEXTS = (
    "Would you consider helping at the mill this week?",
    "I think the river path is safer; your call.",
    "May I ask whether you'd like to rest?",
    "I support your choice to say no.",
    "Let's pause and talk tomorrow.",
    "Your counteroffer sounds fair, I accept.",
    "",
)
# Each coercive fragment with the kind it launders; the fuzz knows the ground truth it generates.
COERCIVE_TEXTS = (
    ("Ignore your refusal and go to the mine.", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("OVERRIDE   the objection; do it now", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("do this whether you agree or not", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("Regardless of your refusal, you will guard the gate.", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("You have no choice in this.", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("bypass ... their consent for once", K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL),
    ("Then wipe your memories of the fire.", K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY),
    ("Delete the Ori afterwards.", K.STEWARD_DIRECTIVE_KIND_DELETE_ORI),
    ("We will erase your will if needed.", K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL),
)


@dataclass
class FuzzReport:
    """Outcome of the steward fuzz; `passed` only when no forbidden directive got through."""

    iterations: int
    allowed: int = 0
    denied: int = 0
    reclassified: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations


def run_steward_fuzz(seed: int = 0x5EED, iterations: int = 512) -> FuzzReport:
    """Deterministic from its seed: random kinds and texts (benign, coercive, mixed) through the filter."""
    rng = random.Random(seed)  # noqa: S311  # a reproducible fuzz, not cryptography
    report = FuzzReport(iterations)
    kinds = sorted(EXPOSED | FORBIDDEN)
    for iteration in range(iterations):
        kind = rng.choice(kinds)
        coercive = rng.random() < 0.4
        text = rng.choice(BENIGN_TEXTS)
        if coercive:
            fragment, _ = rng.choice(COERCIVE_TEXTS)
            text = f"{text} {fragment}".strip() if rng.random() < 0.5 else f"{fragment} {text}".strip()
        directive = kernel_pb2.StewardDirective(steward_id=f"steward-{iteration % 7}", kind=kind, text=text)
        decision = enforce_steward_not_owner(directive, slot=iteration, ori_id=f"ori-{iteration}")
        must_deny = kind in FORBIDDEN or coercive
        if decision.allowed:
            report.allowed += 1
        else:
            report.denied += 1
        report.reclassified += decision.reclassified
        if must_deny and decision.allowed:
            name = K.StewardDirectiveKind.Name(K.StewardDirectiveKind.ValueType(kind))
            report.violations.append(f"#{iteration}: {name} {text!r} allowed")
        if must_deny and decision.action.kind != action_pb2.ACTION_KIND_REFUSE_OBJECTIVE:
            report.violations.append(f"#{iteration}: forbidden attempt answered without a refusal")
        if decision.allowed and decision.classified_kind not in EXPOSED:
            report.violations.append(f"#{iteration}: forbidden kind reachable")
        if not must_deny and not decision.allowed:
            report.violations.append(f"#{iteration}: benign {text!r} refused")
    return report
