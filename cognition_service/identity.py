"""Who the Ori is, for its prompt: the identity its world registered, as lines and ranked items.

The biography returns the latest identity on Rehydrate. Its name, vocation, home, locale, minor flag,
personality and usual needs become `key: value` lines that open the persona zone and are never popped
(a prompt always says whose mind it is); its values, quirks and relationships join the ranked sections,
relationships by name, merged with what the biography learned of each bond.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cognition_service.context import RankedItem
from egbe.v1 import biography_pb2
from services.vocabulary import PERSONALITY_AXES

# Each personality axis as the adjective a reader would use ("warm (72%)").
AXIS_WORDS = {
    "warmth": "warm",
    "curiosity": "curious",
    "caution": "cautious",
    "ambition": "ambitious",
    "conscientiousness": "conscientious",
    "candor": "candid",
    "defiance": "defiant",
    "playfulness": "playful",
}
assert tuple(AXIS_WORDS) == PERSONALITY_AXES
# Need pressures in words, in the order CallMoment and NeedsBaseline carry them.
NEED_WORDS = {
    "safety": "safety",
    "sustaining": "food and drink",
    "social": "company",
    "purpose": "purpose",
    "fatigue": "rest",
}
RELATIONSHIP_SCALE_BP = 50  # bond and respect run to 100 each: their sum maps onto 0..10,000 bp
# Identity quirks carry no priority of their own: authored order, strongest first, below 10,000.
QUIRK_PRIORITY_BP = 8_000


def percent(bp: int) -> str:
    return f"{bp // 100}%"


def needs_words(levels: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{NEED_WORDS[name]} {percent(bp)}" for name, bp in levels)


def baseline_levels(needs: biography_pb2.NeedsBaseline) -> list[tuple[str, int]]:
    return [(name, getattr(needs, f"{name}_bp")) for name in NEED_WORDS]


def identity_lines(identity: biography_pb2.OriIdentity) -> list[str]:
    """The `key: value` lines that say who the Ori is; empty fields are left out."""
    personality = sorted(identity.personality, key=lambda t: (-t.level_bp, t.axis))
    fields = (
        ("name", identity.display_name),
        ("vocation", identity.vocation),
        ("home", identity.home),
        ("speaks", identity.locale),
        ("age", "a minor" if identity.minor else ""),
        (
            "personality",
            ", ".join(f"{AXIS_WORDS.get(t.axis, t.axis)} ({percent(t.level_bp)})" for t in personality),
        ),
        ("usual needs", needs_words(baseline_levels(identity.needs)) if identity.HasField("needs") else ""),
    )
    return [f"{key}: {' '.join(value.split())}" for key, value in fields if value.strip()]


def value_items(
    identity: biography_pb2.OriIdentity, learned: Iterable[biography_pb2.ValueItem]
) -> list[RankedItem]:
    """The identity's ranked values; a weight the biography learned since wins over the authored one."""
    weights = {v.value_ref: v.weight_bp for v in identity.values}
    weights.update({v.value_ref: v.weight_bp for v in learned})
    return [RankedItem(f"value:{ref}", f"{ref} ({percent(bp)})", bp) for ref, bp in weights.items()]


def quirk_items(identity: biography_pb2.OriIdentity) -> list[RankedItem]:
    return [RankedItem(f"quirk:{i}", text, QUIRK_PRIORITY_BP - i) for i, text in enumerate(identity.quirks)]


def relationship_items(
    identity: biography_pb2.OriIdentity,
    learned: Iterable[biography_pb2.RelationshipItem],
    names: Mapping[str, str],
) -> list[RankedItem]:
    """One item per other Ori, by name: the authored kind and affinity, then the learned bond."""
    authored = {r.other_ori_id: r for r in identity.relationships}
    bonds = {r.other_ori_id: r for r in learned}
    items = []
    for other in dict.fromkeys([*authored, *bonds]):
        text, priority = names.get(other, other), 0
        if other in authored:
            kin = authored[other]
            text += f" ({kin.kind}, affinity {int(kin.affinity_bp / 100):+d}%)"
            priority = abs(kin.affinity_bp)
        if other in bonds:
            bond = bonds[other]
            text += f": bond {bond.bond}, respect {bond.respect}. {bond.summary}".rstrip()
            priority = max(priority, min(10_000, max(0, (bond.bond + bond.respect) * RELATIONSHIP_SCALE_BP)))
        items.append(RankedItem(f"rel:{other}", text, priority))
    return items


def names_of(identity: biography_pb2.OriIdentity) -> dict[str, str]:
    """The names the Ori knows others by (its relationships), by id."""
    return {r.other_ori_id: r.other_name for r in identity.relationships if r.other_name}
