"""Pending consolidation fragments: gathered while an Ori is above Atropos, handed over on de-escalation."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, biography_pb2, common_pb2
from kernel_service.agent_state import GUARD_BIT_REPEATED_ACTION, GUARD_BIT_STALE_GOAL
from kernel_service.config import KernelConfig
from kernel_service.fragments import ActionRun, FragmentStore
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import deterministic_digest
from services.errors import InvalidArgument
from tests.kernel_service.frames import frame, make_kernel, rows

GRACE = 4
CONFIG = KernelConfig(deescalation_grace_ticks=GRACE, transition_damping_ticks=0)


def on_screen(tick: int, agents: int) -> object:
    return rows(tick, [frame(slot, on_screen=True, player_nearby_in_world=True) for slot in range(agents)])


def off_screen(tick: int, agents: int) -> object:
    return rows(tick, [frame(slot, player_nearby_in_world=True) for slot in range(agents)])


def said(slot: int, run_id: str) -> action_pb2.ActionIntent:
    payload = struct_pb2.Struct()
    payload.update({"run_id": run_id})
    return action_pb2.ActionIntent(
        slot=slot, kind=action_pb2.ACTION_KIND_SAY, goal_ref=9, priority=6_000, payload=payload
    )


def taken(store: FragmentStore, slot: int, tick: int) -> list[biography_pb2.ConsolidationFragment]:
    """What a hand-over of the slot would carry, as the kernel asks for it."""
    request = action_pb2.LifecycleRequest(slot=slot, ori=common_pb2.OriRef(ori_id=f"ori-{slot}"))
    store.take_into(request, tick)
    return list(request.fragments)


def consolidations(result: action_pb2.TickResult) -> list[action_pb2.LifecycleRequest]:
    return [r for r in result.lifecycle if r.kind == action_pb2.LifecycleRequest.KIND_CONSOLIDATE]


def run_stint(kernel: Kernel, first_tick: int, agents: int) -> tuple[int, list[action_pb2.LifecycleRequest]]:
    """Clotho for 8 ticks with three identical cognition answers to slot 0, then walk off screen."""
    tick = first_tick
    for offset in range(8):
        merged = [said(0, f"run-{tick}")] if offset in (1, 2, 3) else []
        kernel.tick(on_screen(tick, agents), merged)  # type: ignore[arg-type]
        tick += 1
    while True:
        result = kernel.tick(off_screen(tick, agents))  # type: ignore[arg-type]
        tick += 1
        if found := consolidations(result):
            return tick, found


def test_de_escalation_hands_over_what_happened_at_the_higher_tier_once() -> None:
    kernel = make_kernel(2, "c", CONFIG)
    tick, handed = run_stint(kernel, 1, 2)
    request = next(r for r in handed if r.slot == 0)
    assert request.from_tier == common_pb2.COGNITION_TIER_CLOTHO
    moments = [f.payload["moment"] for f in request.fragments]
    assert moments.count("cognition-result") == 3
    assert "guard" in moments  # three identical cognition answers in a row tripped the loop guard
    assert "action" in moments
    merged = [f for f in request.fragments if f.payload["moment"] == "cognition-result"]
    assert [f.payload["run_id"] for f in merged] == ["run-2", "run-3", "run-4"]
    assert [f.world_tick for f in merged] == [2, 3, 4]
    assert all(f.kind == biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED for f in merged)
    guard = next(f for f in request.fragments if f.payload["moment"] == "guard")
    assert guard.kind == biography_pb2.ORI_EVENT_KIND_REFLECTED
    assert list(guard.payload["guards"]) == ["repeated-action"]
    ticks = [f.world_tick for f in request.fragments]
    assert ticks == sorted(ticks)
    assert len({f.fragment_id for f in request.fragments}) == len(request.fragments)
    assert kernel.fragments.pending(0, "ori-0") == []
    # The next stint hands over only its own moments, with ids that never repeat the first stint's.
    _, again = run_stint(kernel, tick, 2)
    second = next(r for r in again if r.slot == 0)
    assert {f.world_tick for f in second.fragments} >= {tick + 1}
    assert min(f.world_tick for f in second.fragments) >= tick
    assert not {f.fragment_id for f in second.fragments} & {f.fragment_id for f in request.fragments}


def test_the_per_agent_bound_keeps_the_latest_and_names_how_many_were_dropped() -> None:
    kernel = make_kernel(1, "numpy", CONFIG.model_copy(update={"max_pending_fragments": 3}))
    _, handed = run_stint(kernel, 1, 1)
    (request,) = handed
    elided, *kept = request.fragments
    assert elided.payload["moment"] == "elided"
    assert elided.payload["bound"] == 3
    assert len(kept) == 3
    assert elided.payload["elided"] >= 1
    assert [f.world_tick for f in kept] == sorted(f.world_tick for f in kept)


def test_pending_fragments_survive_snapshot_and_restore() -> None:
    agents = 2
    original = make_kernel(agents, "c", CONFIG)
    for tick in range(1, 6):
        original.tick(on_screen(tick, agents), [said(0, f"run-{tick}")] if tick == 3 else [])  # type: ignore[arg-type]
    assert original.fragments.pending(0, "ori-0")
    restored = Kernel(CONFIG, select_core("numpy"))
    restored.restore(original.snapshot())
    assert restored.fragments.pending(0, "ori-0") == original.fragments.pending(0, "ori-0")
    for tick in range(6, 6 + GRACE + 4):
        a = original.tick(off_screen(tick, agents))  # type: ignore[arg-type]
        b = restored.tick(off_screen(tick, agents))  # type: ignore[arg-type]
        assert deterministic_digest(a) == deterministic_digest(b)
        if consolidations(a):
            assert consolidations(a)[0].fragments == consolidations(b)[0].fragments
            break
    else:
        raise AssertionError("the Ori never de-escalated")
    snapshot = original.snapshot()
    snapshot.pending_fragments.add(slot=agents + 5)
    with pytest.raises(InvalidArgument) as refused:
        Kernel(CONFIG, select_core("numpy")).restore(snapshot)
    assert (
        refused.value.violations[0].field
        == f"snapshot.pending_fragments[{len(snapshot.pending_fragments) - 1}].slot"
    )


def test_an_ori_that_stays_at_atropos_gathers_nothing() -> None:
    kernel = make_kernel(3, "numpy", CONFIG)
    for tick in range(1, 30):
        kernel.tick(rows(tick, [frame(slot) for slot in range(3)]), [said(1, "far")])  # type: ignore[arg-type]
    assert len(kernel.fragments) == 0


def test_action_changes_between_other_moments_fold_into_one_run() -> None:
    store = FragmentStore(limit=8)
    fields = {
        "out_kind": np.array([action_pb2.ACTION_KIND_WORK, action_pb2.ACTION_KIND_MOVE], np.uint8),
        "out_source": np.full(2, action_pb2.ACTION_SOURCE_BEHAVIOR_TREE, np.uint8),
        "out_goal_ref": np.array([4, 5], np.uint32),
        "out_priority": np.array([100, 200], np.uint16),
    }
    clotho = np.full(2, common_pb2.COGNITION_TIER_CLOTHO, np.uint8)
    for tick in (10, 11, 12):
        store.record_actions(tick, np.array([0 if tick != 11 else 1]), fields)
    store.record_actions(13, np.array([1]), fields)
    store.record_guards(14, np.array([1], np.uint32), np.array([GUARD_BIT_STALE_GOAL], np.uint8), clotho)
    store.record_actions(15, np.array([1]), fields)
    (work,) = taken(store, 0, 16)
    assert work.world_tick == 10
    assert work.payload["changes"] == 2
    assert work.payload["last_tick"] == 12
    assert dict(work.payload["kinds"]) == {"ACTION_KIND_WORK": 2}
    first_run, guard, second_run = taken(store, 1, 16)
    assert [first_run.payload["changes"], second_run.payload["changes"]] == [2, 1]
    assert guard.payload["moment"] == "guard"
    assert second_run.world_tick == 15


def test_an_open_run_restored_from_a_snapshot_keeps_folding_as_it_would_have() -> None:
    fields = {
        "out_kind": np.array([action_pb2.ACTION_KIND_WORK, action_pb2.ACTION_KIND_REST], np.uint8),
        "out_source": np.full(2, action_pb2.ACTION_SOURCE_HTN, np.uint8),
        "out_goal_ref": np.array([4, 4], np.uint32),
        "out_priority": np.array([100, 100], np.uint16),
    }
    clotho = np.full(1, common_pb2.COGNITION_TIER_CLOTHO, np.uint8)
    uninterrupted = FragmentStore(limit=4)
    uninterrupted.record_guards(
        1, np.array([0], np.uint32), np.array([GUARD_BIT_STALE_GOAL], np.uint8), clotho
    )
    uninterrupted.record_actions(2, np.array([0]), fields)
    restored = FragmentStore(limit=4)
    restored.restore(uninterrupted.snapshot(["ori-0"]))
    rest = {name: values[1:] for name, values in fields.items()}
    for store in (uninterrupted, restored):
        store.record_actions(3, np.array([0]), rest)
    assert taken(restored, 0, 4) == taken(uninterrupted, 0, 4)


STALE = np.array([GUARD_BIT_STALE_GOAL], np.uint8)
REPEATED = np.array([GUARD_BIT_REPEATED_ACTION], np.uint8)


def act(store: FragmentStore, tick: int, kind: int = action_pb2.ACTION_KIND_EXPLORE) -> None:
    fields = {
        "out_kind": np.array([kind], np.uint8),
        "out_source": np.array([action_pb2.ACTION_SOURCE_BEHAVIOR_TREE], np.uint8),
        "out_goal_ref": np.array([3], np.uint32),
        "out_priority": np.array([500], np.uint16),
    }
    store.record_actions(tick, np.array([0]), fields)


def stamp(store: FragmentStore, tick: int, bits: np.ndarray) -> None:  # type: ignore[type-arg]
    store.record_guards(
        tick, np.array([0], np.uint32), bits, np.full(1, common_pb2.COGNITION_TIER_CLOTHO, np.uint8)
    )


def test_a_guard_that_keeps_firing_between_actions_is_one_moment_with_its_count() -> None:
    """A goal the world never advances trips the stale-goal guard every few ticks: the stint keeps
    one guard moment and one action run, not a pair per stamp pushing everything else out."""
    store = FragmentStore(limit=4)
    for tick in range(10, 70, 6):
        stamp(store, tick, STALE)
        act(store, tick + 1)
        act(store, tick + 2, action_pb2.ACTION_KIND_PLAN)
    guard, run = taken(store, 0, 80)
    assert guard.kind == biography_pb2.ORI_EVENT_KIND_REFLECTED
    assert (guard.world_tick, guard.payload["count"], guard.payload["last_tick"]) == (10, 10, 64)
    assert guard.payload["text"] == "caught itself: stale-goal x10"
    assert (run.world_tick, run.payload["changes"], run.payload["last_tick"]) == (11, 20, 66)
    assert dict(run.payload["kinds"]) == {"ACTION_KIND_EXPLORE": 10, "ACTION_KIND_PLAN": 10}


def test_a_different_guard_or_a_cognition_result_closes_the_open_runs() -> None:
    store = FragmentStore(limit=8)
    stamp(store, 1, STALE)
    act(store, 2)
    stamp(store, 3, REPEATED)  # a different stamp: both runs are spelled out, a new one opens
    act(store, 4)
    store.record_merged(5, [said(0, "run-5")], np.full(1, common_pb2.COGNITION_TIER_CLOTHO, np.uint8))
    stamp(store, 6, REPEATED)  # the same stamp as before the cognition result, but a new moment
    moments = [(f.payload["moment"], f.world_tick) for f in taken(store, 0, 7)]
    assert moments == [
        ("guard", 1),
        ("action", 2),
        ("guard", 3),
        ("action", 4),
        ("cognition-result", 5),
        ("guard", 6),
    ]


@pytest.mark.parametrize("cut", range(1, 7))
def test_open_guard_and_action_runs_restored_from_a_snapshot_keep_folding(cut: int) -> None:
    steps = [
        lambda s: stamp(s, 1, STALE),
        lambda s: act(s, 2),
        lambda s: stamp(s, 3, STALE),
        lambda s: act(s, 4),
        lambda s: stamp(s, 5, REPEATED),
        lambda s: act(s, 6),
        lambda s: stamp(s, 7, REPEATED),
    ]
    uninterrupted = FragmentStore(limit=4)
    for step in steps[:cut]:
        step(uninterrupted)
    restored = FragmentStore(limit=4)
    restored.restore(uninterrupted.snapshot(["ori-0"]))
    for step in steps[cut:]:
        step(uninterrupted)
        step(restored)
    assert taken(restored, 0, 8) == taken(uninterrupted, 0, 8)


TIERS = (common_pb2.COGNITION_TIER_CLOTHO, common_pb2.COGNITION_TIER_LACHESIS)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["stamp", "act", "merge", "take"]),
        st.integers(0, 2),
        st.integers(1, 3),
        st.integers(0, 1),
    ),
    max_size=30,
)


def apply(
    store: FragmentStore, tick: int, op: tuple[str, int, int, int]
) -> list[biography_pb2.ConsolidationFragment]:
    name, slot, bits, tier = op
    tiers = np.full(3, TIERS[tier], np.uint8)
    if name == "stamp":
        store.record_guards(tick, np.array([slot], np.uint32), np.array([bits], np.uint8), tiers)
    elif name == "act":
        fields = {
            "out_kind": np.full(3, bits, np.uint8),
            "out_source": np.full(3, action_pb2.ACTION_SOURCE_HTN, np.uint8),
            "out_goal_ref": np.full(3, 4, np.uint32),
            "out_priority": np.full(3, 100, np.uint16),
        }
        store.record_actions(tick, np.array([slot]), fields)
    elif name == "merge":
        store.record_merged(tick, [said(slot, f"run-{tick}")], tiers)
    else:
        return taken(store, slot, tick)
    return []


@settings(max_examples=200)
@given(OPS, st.integers(0, 30), st.integers(1, 4))
def test_compact_guard_runs_hand_over_what_the_listed_form_does(
    ops: list[tuple[str, int, int, int]], cut: int, limit: int
) -> None:
    """Slots whose only moment is an open guard run live in arrays; a restored store holds the same
    slots as listed entries. Whatever follows, both hand over the same fragments."""
    compact = FragmentStore(limit)
    for tick, op in enumerate(ops[:cut]):
        apply(compact, tick, op)
    listed = FragmentStore(limit)
    listed.restore(compact.snapshot(["ori-0", "ori-1", "ori-2"]))
    assert len(listed) == len(compact)
    for tick, op in enumerate(ops[cut:], start=cut):
        assert apply(compact, tick, op) == apply(listed, tick, op)
        for store in (compact, listed):  # the open-run index agrees with the moments it indexes
            for slot in range(3):
                assert store._actions.run_of(slot) is store._open(slot, ActionRun)
    assert len(listed) == len(compact)
    for slot in range(3):
        assert taken(compact, slot, 99) == taken(listed, slot, 99)


def test_a_guard_wave_over_a_population_keeps_no_python_object_per_ori() -> None:
    store = FragmentStore(limit=16)
    slots = np.arange(0, 50_000, 2, dtype=np.uint32)
    tiers = np.full(50_000, common_pb2.COGNITION_TIER_LACHESIS, np.uint8)
    for tick in (6, 12, 18):
        store.record_guards(tick, slots, np.full(len(slots), GUARD_BIT_STALE_GOAL, np.uint8), tiers)
    assert store._pending == {}  # every stamped Ori is one compact run, counted in the arrays
    assert len(store) == len(slots)
    (guard,) = taken(store, 4, 20)
    assert (guard.world_tick, guard.payload["count"], guard.payload["last_tick"]) == (6, 3, 18)


def test_registration_sizes_the_fragment_arrays_so_no_tick_grows_them() -> None:
    """Growing them on a tick (a guard wave or a Clotho agent reaching a new highest slot) cost
    60-140 ms at a million agents; registration pays for it instead."""
    kernel = make_kernel(3_000, "numpy", CONFIG)
    store = kernel.fragments

    def arrays() -> list[object]:
        return [store._guard_bits, store._listed, store._guard_count, store._actions.row_of]

    before = arrays()
    tiers = np.full(3_000, common_pb2.COGNITION_TIER_CLOTHO, np.uint8)
    store.record_guards(1, np.array([2_999], np.uint32), STALE, tiers)
    fields = {
        "out_kind": np.full(3_000, action_pb2.ACTION_KIND_EXPLORE, np.uint8),
        "out_source": np.full(3_000, action_pb2.ACTION_SOURCE_BEHAVIOR_TREE, np.uint8),
        "out_goal_ref": np.zeros(3_000, np.uint32),
        "out_priority": np.zeros(3_000, np.uint16),
    }
    store.record_actions(2, np.array([2_998]), fields)
    assert all(after is was for after, was in zip(arrays(), before, strict=True))
