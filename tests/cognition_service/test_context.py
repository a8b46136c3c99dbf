"""Assemble: ranking, the seed's limits, the fixed pop order, honest omitted counts, a stable fingerprint."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from cognition_service.config import AssemblyLimits
from cognition_service.context import POP_ORDER, SECTIONS, ContextInput, RankedItem, assemble_context

LIMITS = AssemblyLimits()


def _items(prefix: str, count: int, length: int = 20) -> list[RankedItem]:
    return [
        RankedItem(f"{prefix}-{i:02d}", (f"{prefix} {i} " * length)[:length], i * 100) for i in range(count)
    ]


def _request(**sections: list[RankedItem]) -> ContextInput:
    return ContextInput("ori-1", "clotho", "dialogue", "en-US", "hello", sections, "arc: apprentice", "calm")


def test_the_seed_limits_are_the_defaults() -> None:
    assert [getattr(LIMITS, name) for name in SECTIONS] == [12, 12, 8, 8, 8, 8, 6]
    assert (LIMITS.item_chars, LIMITS.total_chars) == (240, 16_384)


def test_each_section_keeps_its_highest_priority_items_and_counts_the_rest() -> None:
    context = assemble_context(_request(**{name: _items(name, 20) for name in SECTIONS}), LIMITS)
    for name in SECTIONS:
        kept = context.sections[name]
        limit = getattr(LIMITS, name)
        assert len(kept) == limit
        assert [i.priority_bp for i in kept] == sorted((i * 100 for i in range(20)), reverse=True)[:limit]
        assert context.omitted[name] == 20 - limit
    assert context.clipped


def test_long_items_are_clipped_to_240_chars_and_counted() -> None:
    context = assemble_context(_request(memories=[RankedItem("m", "x" * 500, 1)]), LIMITS)
    assert len(context.sections["memories"][0].text) == 240
    assert context.omitted["item_chars"] == 260
    assert context.clipped


def test_over_budget_pops_memories_first_then_relationships_then_the_rest() -> None:
    limits = AssemblyLimits(total_chars=400)
    request = _request(**{name: _items(name, 4, length=40) for name in SECTIONS})  # 7*4*40 = 1120 chars
    context = assemble_context(request, limits)
    assert context.context_chars() <= 400
    assert context.omitted["memories"] == 4
    assert context.omitted["relationships"] == 4
    assert context.omitted["objectives"] == 4
    assert context.omitted["quirks"] == 4
    # 1,139 chars: after 16 items of 40 chars, three more values (the three lowest) fit the 400.
    assert context.omitted["values"] == 3
    assert [i.priority_bp for i in context.sections["values"]] == [300]
    assert "traits" not in context.omitted
    assert "perception" not in context.omitted
    assert POP_ORDER == (
        "memories",
        "relationships",
        "objectives",
        "quirks",
        "values",
        "traits",
        "perception",
    )


def test_when_every_list_is_empty_the_arc_and_emotion_prose_shrink() -> None:
    request = dataclasses.replace(_request(), arc_state="a" * 300, emotion="e" * 300)
    context = assemble_context(request, AssemblyLimits(total_chars=400))
    assert context.context_chars() <= 400
    assert context.omitted["arc_state_chars"] == 200
    assert context.clipped


def test_nothing_omitted_means_not_clipped() -> None:
    context = assemble_context(_request(memories=_items("memories", 3)), LIMITS)
    assert not context.clipped
    assert context.omitted == {}


def test_the_fingerprint_is_stable_and_order_independent() -> None:
    forward = assemble_context(_request(memories=_items("m", 5)), LIMITS)
    backward = assemble_context(_request(memories=list(reversed(_items("m", 5)))), LIMITS)
    changed = assemble_context(dataclasses.replace(_request(memories=_items("m", 5)), stimulus="bye"), LIMITS)
    assert forward.fingerprint == backward.fingerprint
    assert len(forward.fingerprint) == 16
    assert changed.fingerprint != forward.fingerprint


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=7, max_size=7),
    length=st.integers(1, 400),
    budget=st.integers(64, 3_000),
    prose=st.integers(0, 2_000),
)
def test_the_context_never_exceeds_its_budget_and_every_drop_is_counted(
    sizes: list[int], length: int, budget: int, prose: int
) -> None:
    sections = {name: _items(name, n, length) for name, n in zip(SECTIONS, sizes, strict=True)}
    request = dataclasses.replace(_request(**sections), arc_state="a" * prose, emotion="e" * prose)
    limits = AssemblyLimits(total_chars=budget)
    context = assemble_context(request, limits)
    assert context.context_chars() <= budget
    for name, n in zip(SECTIONS, sizes, strict=True):
        assert len(context.sections[name]) + context.omitted.get(name, 0) == n
    assert context.clipped == bool(context.omitted)
