"""De-escalation consolidation: the no-state-loss property (hypothesis), and a lossy fold caught."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from biography_service.consolidation import Fragment, fold_by_kind, state_loss_report
from biography_service.errors import StateLossDetected
from biography_service.events import IDENTITY_KINDS, EventKind, NewEvent
from biography_service.payloads import payload_problems
from biography_service.service import Biography
from tests.biography.conftest import TEST_CONFIG

FOLDABLE = [kind for kind in EventKind if kind is not EventKind.CONSOLIDATED and kind not in IDENTITY_KINDS]
PAYLOADS = {
    EventKind.MEMORY_FORMED: {"text": "a memory", "salience_bp": 4000},
    EventKind.REFLECTED: {"text": "a reflection"},
    EventKind.RELATIONSHIP_CHANGED: {"other_ori_id": "ori-b", "bond": 3},
    EventKind.ARC_ADVANCED: {"arc_ref": "arc:x"},
    EventKind.PERSONALITY_EVENT: {"summary": "steadier"},
    EventKind.VALUE_SHIFT: {"value_ref": "value:care", "weight_bp": 6000},
    EventKind.GOAL_ARC_ADVANCED: {"arc_ref": "goal:y", "status": "completed"},
    EventKind.DIRECTIVE_REFUSED: {"directive": "leave home"},
}

fragments_strategy = st.lists(
    st.builds(
        lambda fragment_id, kind, tick: Fragment(fragment_id, kind, dict(PAYLOADS[kind]), tick),
        st.text(min_size=1, max_size=12).filter(str.strip),  # the wire refuses blank ids
        st.sampled_from(FOLDABLE),
        st.integers(min_value=0, max_value=2**40),
    ),
    min_size=1,
    max_size=40,
    unique_by=lambda f: f.fragment_id,
)


def lossy_fold(ori_id: str, request_id: str, fragments: Sequence[Fragment]) -> list[NewEvent]:
    """A deliberately broken consolidation: it forgets the last fragment."""
    return fold_by_kind(ori_id, request_id, fragments[:-1])


@settings(max_examples=200, deadline=None)
@given(fragments_strategy)
def test_folding_by_kind_never_loses_a_fragment(fragments: list[Fragment]) -> None:
    events = fold_by_kind("ori-a", "req", fragments)
    report = state_loss_report(fragments, events)
    assert report.no_state_loss
    assert report.missing_fragment_ids == []
    # Grouped by kind: one event per distinct kind, each a valid Consolidated payload.
    assert len(events) == len({f.kind for f in fragments})
    for folded in events:
        assert folded.kind is EventKind.CONSOLIDATED
        assert payload_problems(EventKind.CONSOLIDATED, folded.payload) == []


@settings(max_examples=100, deadline=None)
@given(fragments_strategy)
def test_a_lossy_fold_is_flagged_naming_the_dropped_fragment(fragments: list[Fragment]) -> None:
    report = state_loss_report(fragments, lossy_fold("ori-a", "req", fragments))
    assert not report.no_state_loss
    assert report.missing_fragment_ids == [fragments[-1].fragment_id]


def test_consolidation_ids_are_stable_so_a_repeat_is_idempotent() -> None:
    fragments = [Fragment("f1", EventKind.MEMORY_FORMED, {"text": "t"}, 1)]
    assert fold_by_kind("ori-a", "r", fragments) == fold_by_kind("ori-a", "r", fragments)
    assert (
        fold_by_kind("ori-a", "r", fragments)[0].event_id != fold_by_kind("ori-b", "r", fragments)[0].event_id
    )


async def test_the_service_writes_nothing_when_a_consolidation_would_lose_state(biography: Biography) -> None:
    lossy = Biography(biography.store, TEST_CONFIG, fold=lossy_fold)
    fragments = [
        Fragment("f1", EventKind.MEMORY_FORMED, {"text": "kept"}, 1),
        Fragment("f2", EventKind.MEMORY_FORMED, {"text": "dropped"}, 2),
    ]
    with pytest.raises(StateLossDetected) as caught:
        await lossy.consolidate("ori-a", fragments, "req-1")
    assert caught.value.missing == ["f2"]
    assert await biography.store.stream_version("ori-a") is None
    done = await biography.consolidate("ori-a", fragments, "req-1")
    assert done.report.no_state_loss
    assert [e.payload["fragment_kind"] for e in done.events] == ["MemoryFormed"]
    snap = await biography.store.snapshot("ori-a", limit=10, memory_window=10)
    assert {m.ref for m in snap.memories} == {"f1", "f2"}


async def test_consolidating_nothing_pending_writes_nothing(biography: Biography) -> None:
    done = await biography.consolidate("ori-a", [], "req-empty")
    assert done.events == []
    assert done.report.no_state_loss
    assert await biography.store.stream_version("ori-a") is None
