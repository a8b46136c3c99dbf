"""Fits an Ori's projections into a load budget: the working context a first Clotho decision reads.

The identity is not an item of the budget: who the Ori is comes with every context it is registered in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest

from biography_service.events import JsonObject
from biography_service.projections import (
    SECTIONS,
    MemoryView,
    ProjectionSnapshot,
    RelationshipView,
    ValueView,
)


@dataclass(frozen=True)
class LoadBudget:
    """At most `max_events` items and `max_chars` characters of text in the working context."""

    max_events: int
    max_chars: int


@dataclass
class WorkingContext:
    """What rehydration returns, and how many items of each section it left out."""

    ori_id: str
    stream_version: int | None
    memories: list[MemoryView] = field(default_factory=list)
    relationships: list[RelationshipView] = field(default_factory=list)
    arc_refs: list[str] = field(default_factory=list)
    personality_events: list[str] = field(default_factory=list)
    values: list[ValueView] = field(default_factory=list)
    chars_used: int = 0
    omitted: dict[str, int] = field(default_factory=dict)
    # Outside the budget: present whenever an identity was registered (the OriIdentity as protobuf JSON).
    identity: JsonObject | None = None
    identity_version: int = 0

    def cited_refs(self) -> set[str]:
        """Every memory, relationship and arc ref the context carries (what a decision can cite)."""
        return (
            {memory.ref for memory in self.memories}
            | {relationship.other_ori_id for relationship in self.relationships}
            | set(self.arc_refs)
        )


Item = MemoryView | RelationshipView | str | ValueView


def _chars(item: Item) -> int:
    if isinstance(item, MemoryView):
        return len(item.ref) + len(item.text)
    if isinstance(item, RelationshipView):
        return len(item.other_ori_id) + len(item.summary)
    if isinstance(item, ValueView):
        return len(item.value_ref)
    return len(item)


def _round_robin(snapshot: ProjectionSnapshot) -> Iterator[tuple[str, Item]]:
    """Best-first within each section, one section at a time in turn, so no section starves the others."""
    sections: list[list[tuple[str, Item]]] = [
        [("arc_refs", a) for a in snapshot.arc_refs],
        [("relationships", r) for r in snapshot.relationships],
        [("memories", m) for m in snapshot.memories],
        [("personality_events", p) for p in snapshot.personality_events],
        [("values", v) for v in snapshot.values],
    ]
    for turn in zip_longest(*sections):
        yield from (entry for entry in turn if entry is not None)


def rehydrate(snapshot: ProjectionSnapshot, budget: LoadBudget) -> WorkingContext:
    """Take items in priority order while both budgets allow; count everything else as omitted."""
    context = WorkingContext(
        snapshot.ori_id,
        snapshot.stream_version,
        identity=snapshot.identity,
        identity_version=snapshot.identity_version,
    )
    kept = dict.fromkeys(SECTIONS, 0)
    loaded = 0
    for section, item in _round_robin(snapshot):
        cost = _chars(item)
        if loaded >= budget.max_events or context.chars_used + cost > budget.max_chars:
            continue
        loaded += 1
        context.chars_used += cost
        kept[section] += 1
        if isinstance(item, MemoryView):
            context.memories.append(item)
        elif isinstance(item, RelationshipView):
            context.relationships.append(item)
        elif isinstance(item, ValueView):
            context.values.append(item)
        elif section == "arc_refs":
            context.arc_refs.append(item)
        else:
            context.personality_events.append(item)
    context.omitted = {
        name: snapshot.totals[name] - kept[name] for name in SECTIONS if snapshot.totals[name] > kept[name]
    }
    return context
