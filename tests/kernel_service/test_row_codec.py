"""The C row codec reads and writes exactly what the Python reference does."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, perception_pb2
from kernel_service.cognition_calls import CallEstimates
from kernel_service.row_codec import INTENT_FIELDS, Calls, CRowCodec, PythonRowCodec

u32 = st.integers(0, 2**32 - 1)
frames = st.builds(
    perception_pb2.PerceptionFrame,
    slot=u32,
    visual_lod=st.integers(0, 4),
    player_proximity_mm=st.integers(-(2**31), 2**31 - 1),
    addressed_by_player_id=u32,
    on_screen=st.booleans(),
    open_crossroads=st.booleans(),
    imminent_irreversible_action=st.booleans(),
    scene_copresence=st.booleans(),
    player_nearby_in_world=st.booleans(),
    goal_ref=u32,
    goal_progress_signature=st.integers(0, 2**64 - 1),
    need_safety_bp=u32,
    need_sustaining_bp=u32,
    need_social_bp=u32,
    need_purpose_bp=u32,
    fatigue_bp=u32,
    threat_present=st.booleans(),
    minor_present=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(frames, max_size=40), st.text(max_size=8), st.integers(0, 2**64 - 1))
def test_c_row_reader_equals_python(
    rows: list[perception_pb2.PerceptionFrame], world: str, tick: int
) -> None:
    batch = perception_pb2.PerceptionBatch(world_id=world, tick=tick, frames=rows)
    table_py, progress_py = PythonRowCodec().read_rows(batch)
    table_c, progress_c = CRowCodec().read_rows(batch)
    assert np.array_equal(table_c, table_py)
    assert np.array_equal(progress_c, progress_py)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.data())
def test_c_intent_writer_equals_python(agents: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    columns = {
        "out_kind": rng.integers(0, 17, agents).astype(np.uint8),
        "out_goal_ref": rng.choice([0, 1, 2**32 - 1], agents).astype(np.uint32),
        "out_priority": rng.integers(0, 10_001, agents).astype(np.uint16),
        "tier": rng.integers(0, 4, agents).astype(np.uint8),
        "out_source": rng.integers(0, 7, agents).astype(np.uint8),
        "out_plan_step": rng.choice([0, 1, 65535], agents).astype(np.uint16),
        "tier_reason": rng.integers(0, 11, agents).astype(np.uint8),
    }
    assert set(columns) == set(INTENT_FIELDS)
    ori_ids = [data.draw(st.text(max_size=200)) for _ in range(agents)]
    slots = rng.permutation(agents)[: data.draw(st.integers(0, agents))].astype(np.uint32)
    by_python, by_c = action_pb2.ActionBatch(tick=3), action_pb2.ActionBatch(tick=3)
    PythonRowCodec().write_intents(by_python, slots, columns, ori_ids)
    CRowCodec().write_intents(by_c, slots, columns, ori_ids)
    assert by_c.SerializeToString(deterministic=True) == by_python.SerializeToString(deterministic=True)


def test_c_intent_writer_follows_a_replaced_registry_of_the_same_size() -> None:
    """A restore swaps in another Ori list of the same length: answers must name the new Ori."""
    columns = {
        name: np.zeros(2, dtype=np.uint8 if name != "out_goal_ref" else np.uint32) for name in INTENT_FIELDS
    }
    columns["out_priority"] = np.zeros(2, dtype=np.uint16)
    columns["out_plan_step"] = np.zeros(2, dtype=np.uint16)
    codec = CRowCodec()
    slots = np.array([0, 1], dtype=np.uint32)
    first, second = action_pb2.ActionBatch(), action_pb2.ActionBatch()
    codec.write_intents(first, slots, columns, ["ori-a", "ori-b"])
    codec.write_intents(second, slots, columns, ["ori-x", "ori-y"])
    assert [i.ori_id for i in first.intents] == ["ori-a", "ori-b"]
    assert [i.ori_id for i in second.intents] == ["ori-x", "ori-y"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.data())
def test_c_candidate_writer_equals_python(agents: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    count = data.draw(st.integers(0, 3 * agents))
    group_ids = data.draw(st.lists(st.text(max_size=30), max_size=3))
    calls = Calls(
        world_id=data.draw(st.text(max_size=20)),
        tick=data.draw(st.integers(0, 2**64 - 1)),
        slots=rng.integers(0, agents, count).astype(np.uint32),
        causes=rng.integers(0, 9, count).astype(np.uint8),
        tiers=rng.integers(0, 4, count).astype(np.uint8),
        bits=rng.integers(0, 2, count).astype(np.uint8),
        estimates=CallEstimates(
            tokens=rng.choice([0, 1, 8_000, 2**40], count).astype(np.int64),
            costs=rng.choice([0, 1, 2_640, 2**50], count).astype(np.int64),
            group_of=rng.integers(-1, len(group_ids), count).astype(np.int32),
            group_ids=group_ids,
            overhead_tokens_saved=0,
            savings_bp=0,
        ),
        routes={tier: data.draw(st.text(max_size=40)) for tier in range(4)},
        ori_ids=[data.draw(st.text(max_size=200)) for _ in range(agents)],
        tenant_ids=[data.draw(st.text(max_size=12)) for _ in range(agents)],
    )
    by_python, by_c = action_pb2.TickResult(), action_pb2.TickResult()
    PythonRowCodec().write_candidates(by_python, calls)
    CRowCodec().write_candidates(by_c, calls)
    assert len(by_c.candidates) == count
    assert by_c.SerializeToString(deterministic=True) == by_python.SerializeToString(deterministic=True)


def test_c_writers_follow_a_registry_that_grows_between_ticks() -> None:
    """Registration appends to the Ori list in place; the C codec's table is extended, not rebuilt,
    and must still name every Ori (the old ones and the new) as the Python codec does."""
    columns = {
        name: np.zeros(6, dtype=np.uint8 if name != "out_goal_ref" else np.uint32) for name in INTENT_FIELDS
    }
    columns["out_priority"] = np.zeros(6, dtype=np.uint16)
    columns["out_plan_step"] = np.zeros(6, dtype=np.uint16)
    ori_ids = ["ori-a", "ori-ß"]
    codec = CRowCodec()
    for added in ([], ["ori-ccc", ""], ["ori-дд", "ori-e"]):
        ori_ids.extend(added)
        slots = np.arange(len(ori_ids), dtype=np.uint32)[::-1].copy()
        by_c, by_python = action_pb2.ActionBatch(), action_pb2.ActionBatch()
        codec.write_intents(by_c, slots, columns, ori_ids)
        PythonRowCodec().write_intents(by_python, slots, columns, ori_ids)
        assert by_c.SerializeToString(deterministic=True) == by_python.SerializeToString(deterministic=True)


def ascending(agents: int) -> st.SearchStrategy[np.ndarray]:  # type: ignore[type-arg]
    return st.sets(st.integers(0, agents - 1)).map(lambda slots: np.array(sorted(slots), np.uint32))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.data())
def test_c_delta_answer_union_equals_python(agents: int, data: st.DataObject) -> None:
    """Changed, guarded and merged slots overlapping any which way (or empty): the same union and
    guard bits, and the Python codec leaves its mark bytes zeroed."""
    changed = data.draw(ascending(agents))
    guarded = data.draw(ascending(agents))
    guard_bits = np.array(
        data.draw(st.lists(st.integers(1, 3), min_size=len(guarded), max_size=len(guarded))), np.uint8
    )
    merged = data.draw(ascending(agents))
    marks = np.zeros(agents, np.uint8)
    expected = PythonRowCodec().answered_slots(changed, guarded, guard_bits, merged, marks)
    got = CRowCodec().answered_slots(changed, guarded, guard_bits, merged, np.zeros(agents, np.uint8))
    assert got[0].tolist() == expected[0].tolist()
    assert got[1].tolist() == expected[1].tolist()
    assert expected[0].tolist() == sorted({*changed.tolist(), *guarded.tolist(), *merged.tolist()})
    assert not marks.any()
