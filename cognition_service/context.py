"""Stage 1, assemble: rank each context section, truncate to the limits, fit the budget, fingerprint."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from cognition_service.config import AssemblyLimits
from services.fingerprint import fingerprint

SECTIONS = ("perception", "traits", "values", "quirks", "memories", "relationships", "objectives")
# When the whole context is still over budget, the lowest-priority items go first from these sections.
POP_ORDER = ("memories", "relationships", "objectives", "quirks", "values", "traits", "perception")
CLIP_MARK = "…"


@dataclass(frozen=True)
class RankedItem:
    """One context item; priority (salience) in basis points decides what survives truncation."""

    ref: str
    text: str
    priority_bp: int


@dataclass(frozen=True)
class ContextInput:
    """Everything known about the Ori for this request, before ranking and limits."""

    ori_id: str
    tier: str
    mode: str
    locale: str
    stimulus: str
    sections: Mapping[str, Iterable[RankedItem]]
    arc_state: str = ""
    emotion: str = ""
    persona: str = ""
    # Who the Ori is, as `key: value` lines: always kept, never popped, each clipped to an item's length.
    identity: tuple[str, ...] = ()


@dataclass(frozen=True)
class AssembledContext:
    """The bounded context: ranked sections, honest omitted counts, and the request fingerprint."""

    ori_id: str
    tier: str
    mode: str
    locale: str
    stimulus: str
    persona: str
    sections: dict[str, tuple[RankedItem, ...]]
    arc_state: str
    emotion: str
    identity: tuple[str, ...] = ()
    omitted: dict[str, int] = field(default_factory=dict)
    clipped: bool = False
    fingerprint: str = ""

    def context_chars(self) -> int:
        return context_chars(self.sections, self.arc_state, self.emotion) + sum(map(len, self.identity))

    def canonical(self) -> dict[str, object]:
        """The canonical request the fingerprint covers (no run id: equal contexts share a cache key)."""
        return {
            "ori_id": self.ori_id,
            "tier": self.tier,
            "mode": self.mode,
            "locale": self.locale,
            "stimulus": self.stimulus,
            "persona": self.persona,
            "identity": list(self.identity),
            "sections": {
                name: [[i.ref, i.text, i.priority_bp] for i in items] for name, items in self.sections.items()
            },
            "arc_state": self.arc_state,
            "emotion": self.emotion,
        }


def context_chars(sections: Mapping[str, tuple[RankedItem, ...]], arc_state: str, emotion: str) -> int:
    return sum(len(i.text) for items in sections.values() for i in items) + len(arc_state) + len(emotion)


def clip_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - len(CLIP_MARK), 0)] + CLIP_MARK


def _rank(items: Iterable[RankedItem]) -> list[RankedItem]:
    # Highest priority first; the ref breaks ties so the order never depends on arrival order.
    return sorted(items, key=lambda i: (-i.priority_bp, i.ref))


def assemble_context(request: ContextInput, limits: AssemblyLimits) -> AssembledContext:
    """Rank, truncate to per-section limits and item length, then pop to the character budget."""
    unknown = set(request.sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown context sections {sorted(unknown)}")
    omitted: dict[str, int] = {}
    sections: dict[str, list[RankedItem]] = {}
    for name in SECTIONS:
        ranked = _rank(request.sections.get(name, ()))
        limit: int = getattr(limits, name)
        if len(ranked) > limit:
            omitted[name] = len(ranked) - limit
        kept = []
        for item in ranked[:limit]:
            text = clip_text(item.text, limits.item_chars)
            if text != item.text:
                omitted["item_chars"] = omitted.get("item_chars", 0) + len(item.text) - len(text)
            kept.append(replace(item, text=text))
        sections[name] = kept

    identity = tuple(clip_text(line, limits.item_chars) for line in request.identity)
    clipped_identity = sum(map(len, request.identity)) - sum(map(len, identity))
    if clipped_identity:
        omitted["item_chars"] = omitted.get("item_chars", 0) + clipped_identity
    arc_state, emotion = request.arc_state, request.emotion
    over = (
        context_chars({k: tuple(v) for k, v in sections.items()}, arc_state, emotion)
        + sum(map(len, identity))
        - limits.total_chars
    )
    for name in POP_ORDER:
        while over > 0 and sections[name]:
            dropped = sections[name].pop()  # the lowest-priority item left in this section
            omitted[name] = omitted.get(name, 0) + 1
            over -= len(dropped.text)
    prose = {"arc_state": arc_state, "emotion": emotion}
    for prose_name, text in prose.items():
        if over <= 0:
            break
        keep = max(len(text) - over, 0)
        shrunk = clip_text(text, keep) if keep > len(CLIP_MARK) else ""
        omitted[f"{prose_name}_chars"] = len(text) - len(shrunk)
        over -= len(text) - len(shrunk)
        prose[prose_name] = shrunk
    stimulus = clip_text(request.stimulus, limits.stimulus_chars)
    persona = clip_text(request.persona, limits.persona_chars)
    omitted["stimulus_chars"] = len(request.stimulus) - len(stimulus)
    omitted["persona_chars"] = len(request.persona) - len(persona)

    assembled = AssembledContext(
        ori_id=request.ori_id,
        tier=request.tier,
        mode=request.mode,
        locale=request.locale,
        stimulus=stimulus,
        persona=persona,
        sections={name: tuple(items) for name, items in sections.items()},
        arc_state=prose["arc_state"],
        emotion=prose["emotion"],
        identity=identity,
        omitted={k: v for k, v in omitted.items() if v},
        clipped=any(omitted.values()),
    )
    return replace(assembled, fingerprint=fingerprint(assembled.canonical()))
