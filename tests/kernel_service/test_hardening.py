"""Bad state and bad input at the kernel's doors: refused whole (nothing changes), and the C core
checks the indexes it takes from state itself."""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.behavior.vocabulary import Emotion
from kernel_service.bounds import MAX_TICK
from kernel_service.cognition_calls import CallEstimates
from kernel_service.errors import CoreStateError
from kernel_service.kernel import Kernel
from kernel_service.row_codec import Calls, CRowCodec, PythonRowCodec
from services.errors import InvalidArgument
from tests.kernel_service.frames import CORES, WORLD, columns, frame, make_kernel, rows

AGENTS = 6


def _state(kernel: Kernel) -> bytes:
    return kernel.snapshot().SerializeToString(deterministic=True)


def _ticked(core: str) -> Kernel:
    kernel = make_kernel(AGENTS, core, behavior=True)
    for tick in range(1, 4):
        kernel.tick(columns(tick, signal_flags=np.full(AGENTS, 1 << 5, np.uint16)))
    return kernel


def _with_array(
    snapshot: kernel_pb2.KernelSnapshot, name: str, values: np.ndarray, *, behavior: bool = False
) -> kernel_pb2.KernelSnapshot:
    changed = kernel_pb2.KernelSnapshot()
    changed.CopyFrom(snapshot)
    arrays = changed.behavior_arrays if behavior else changed.arrays
    [named] = [a for a in arrays if a.name == name]
    named.dtype = values.dtype.str
    named.data = values.tobytes()
    return changed


def _fields(error: pytest.ExceptionInfo[InvalidArgument]) -> list[str]:
    return [violation.field for violation in error.value.violations]


def _refused(kernel: Kernel, snapshot: kernel_pb2.KernelSnapshot) -> list[str]:
    before = _state(kernel)
    with pytest.raises(InvalidArgument) as refused:
        kernel.restore(snapshot)
    assert _state(kernel) == before
    return _fields(refused)


@pytest.mark.parametrize("core", CORES)
def test_a_text_array_in_a_snapshot_is_refused_before_anything_is_replaced(core: str) -> None:
    kernel = _ticked(core)
    other = _ticked(core)
    other.tick(columns(9, signal_flags=np.zeros(AGENTS, np.uint16)))
    snapshot = _with_array(other.snapshot(), "cached_priority", np.array(["x"] * AGENTS))
    assert _refused(kernel, snapshot) == ["snapshot.arrays.cached_priority"]


@pytest.mark.parametrize("core", CORES)
def test_a_wrong_width_array_is_refused_not_cast(core: str) -> None:
    kernel = _ticked(core)
    snapshot = _with_array(kernel.snapshot(), "tier", np.ones(AGENTS, np.uint32))
    assert _refused(kernel, snapshot) == ["snapshot.arrays.tier"]


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize(
    ("name", "value"),
    [("tier", 200), ("tier_reason", 16), ("cached_kind", 17), ("out_source", 7), ("fatigue_bp", 10_001)],
)
def test_an_agent_value_outside_its_range_is_refused(core: str, name: str, value: int) -> None:
    kernel = _ticked(core)
    values = np.frombuffer(
        next(a for a in kernel.snapshot().arrays if a.name == name).data,
        dtype=kernel.arrays.fields[name].dtype,
    ).copy()
    values[2] = value
    assert _refused(kernel, _with_array(kernel.snapshot(), name, values)) == [f"snapshot.arrays.{name}"]


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("plan_method", 500),
        ("plan_method", -2),
        ("plan_cursor", 40),
        ("mood_valence", 2**31 - 1),
        ("emotion", 8),
    ],
)
def test_a_behaviour_value_outside_its_range_is_refused(core: str, name: str, value: int) -> None:
    kernel = _ticked(core)
    snapshot = kernel.snapshot()
    named = next(a for a in snapshot.behavior_arrays if a.name == name)
    values = np.frombuffer(named.data, dtype=np.dtype(named.dtype)).copy()
    values[1] = value
    assert _refused(kernel, _with_array(snapshot, name, values, behavior=True)) == [
        f"snapshot.behavior_arrays.{name}"
    ]


@pytest.mark.parametrize("core", CORES)
def test_behaviour_arrays_shorter_than_the_population_are_refused(core: str) -> None:
    kernel = _ticked(core)
    snapshot = kernel_pb2.KernelSnapshot()
    snapshot.CopyFrom(kernel.snapshot())
    for named in snapshot.behavior_arrays:
        values = np.frombuffer(named.data, dtype=np.dtype(named.dtype))
        rows_per_agent = len(values) // len(kernel.behavior.snapshot()["quirks"])  # type: ignore[union-attr]
        named.data = values.reshape(rows_per_agent, -1)[:, :2].tobytes()
    assert _refused(kernel, snapshot) == ["snapshot.behavior_arrays.quirks"]


@pytest.mark.parametrize("core", CORES)
def test_fewer_tenants_than_ori_are_refused(core: str) -> None:
    kernel = _ticked(core)
    snapshot = kernel.snapshot()
    del snapshot.tenant_ids[-1]
    assert _refused(kernel, snapshot) == ["snapshot.tenant_ids"]


@pytest.mark.parametrize("core", CORES)
def test_merged_results_that_do_not_fit_refuse_the_tick_whole(core: str) -> None:
    kernel = _ticked(core)
    before = _state(kernel)
    bad = [
        action_pb2.ActionIntent(slot=1, kind=action_pb2.ACTION_KIND_WORK),
        action_pb2.ActionIntent(slot=2, kind=300),  # type: ignore[arg-type]
        action_pb2.ActionIntent(slot=3, kind=action_pb2.ACTION_KIND_REST, plan_step=65_536),
    ]
    with pytest.raises(InvalidArgument) as refused:
        kernel.tick(columns(10, signal_flags=np.zeros(AGENTS, np.uint16)), bad)
    assert _fields(refused) == ["merged_results[1].kind", "merged_results[2].plan_step"]
    assert _state(kernel) == before


@pytest.mark.parametrize("core", CORES)
def test_the_last_tick_a_world_may_use_is_accepted_and_the_next_refused(core: str) -> None:
    kernel = make_kernel(AGENTS, core)
    kernel.tick(rows(MAX_TICK, [frame(0, on_screen=True)]))
    assert kernel.last_tick == MAX_TICK
    before = _state(kernel)
    with pytest.raises(InvalidArgument) as refused:
        kernel.tick(rows(MAX_TICK + 1, [frame(0)]))
    assert _fields(refused) == ["batch.tick"]
    assert _state(kernel) == before
    kernel.tick(rows(MAX_TICK, [frame(1, on_screen=True)]))  # the world goes on at its last tick


@pytest.mark.parametrize(
    ("ori", "field"),
    [
        (common_pb2.OriRef(ori_id="ori\x00x", tenant_id="t"), "agents[1].ori.ori_id"),
        (common_pb2.OriRef(ori_id="ori-\n", tenant_id="t"), "agents[1].ori.ori_id"),
        (common_pb2.OriRef(ori_id="o" * 129, tenant_id="t"), "agents[1].ori.ori_id"),
        (common_pb2.OriRef(ori_id="ori-x", tenant_id="t\x07"), "agents[1].ori.tenant_id"),
        (common_pb2.OriRef(ori_id="ori-x", tenant_id="t", world_id="w" * 200), "agents[1].ori.world_id"),
    ],
)
def test_registration_bounds_ids_and_registers_nobody_on_a_bad_one(
    ori: common_pb2.OriRef, field: str
) -> None:
    kernel = make_kernel(0)  # no world claimed yet: an Ori's world id is checked on its own
    before = _state(kernel)
    good = kernel_pb2.AgentRegistration(ori=common_pb2.OriRef(ori_id="ori-new", tenant_id="t"))
    with pytest.raises(InvalidArgument) as refused:
        kernel.register("", [good, kernel_pb2.AgentRegistration(ori=ori)])
    assert _fields(refused) == [field]
    assert _state(kernel) == before
    longest = kernel_pb2.AgentRegistration(ori=common_pb2.OriRef(ori_id="o" * 128, tenant_id="t " * 64))
    assert kernel.register(WORLD, [longest]) == [0]


@pytest.mark.parametrize("core", CORES)
def test_a_mood_at_the_int32_limit_saturates_alike_in_both_cores(core: str) -> None:
    """Set past any restore (which refuses it): the step itself must not wrap to a negative mood."""
    kernel = make_kernel(1, core, behavior=True)
    layer = kernel.behavior
    layer.mood_valence[0] = 2**31 - 1  # type: ignore[union-attr]
    layer.mood_arousal[0] = 10_000  # type: ignore[union-attr]
    layer.mood_active[0] = True  # type: ignore[union-attr]
    kernel.tick(columns(0, player_proximity_mm=np.full(1, 2**31 - 1, np.int32)))
    assert Emotion(int(layer.emotion[0])) == Emotion.DETERMINED  # type: ignore[union-attr]


def test_the_c_step_refuses_a_plan_outside_the_library_instead_of_reading_past_it() -> None:
    kernel = make_kernel(4, "c", behavior=True)
    kernel.behavior.plan_method[2] = 500  # type: ignore[union-attr]
    kernel.behavior.evaluated[2] = True  # type: ignore[union-attr]
    with pytest.raises(CoreStateError):
        kernel.tick(columns(0, player_proximity_mm=np.full(4, 2**31 - 1, np.int32)))


def _calls(tiers: list[int], tenants: list[str]) -> Calls:
    count = len(tiers)
    return Calls(
        world_id=WORLD,
        tick=5,
        slots=np.arange(count, dtype=np.uint32),
        causes=np.full(count, 2, np.uint8),
        tiers=np.array(tiers, np.uint8),
        bits=np.zeros(count, np.uint8),
        estimates=CallEstimates(
            tokens=np.ones(count, np.int64),
            costs=np.ones(count, np.int64),
            group_of=np.full(count, -1, np.int32),
            group_ids=[],
            overhead_tokens_saved=0,
            savings_bp=0,
        ),
        routes={1: "opus", 2: "sonnet", 3: "haiku"},
        ori_ids=[f"ori-{i}" for i in range(count)],
        tenant_ids=tenants,
    )


@pytest.mark.parametrize(
    ("tiers", "tenants"), [([2, 200], ["t", "t"]), ([2, 2], ["t"])], ids=["tier-200", "short-tenants"]
)
def test_the_c_candidate_encoder_checks_every_table_index(tiers: list[int], tenants: list[str]) -> None:
    with pytest.raises(ValueError, match="string tables do not hold"):
        CRowCodec().write_candidates(action_pb2.TickResult(), _calls(tiers, tenants))


def test_both_row_decoders_skip_an_unknown_group_field_in_a_frame() -> None:
    batch = rows(3, [frame(1, on_screen=True, need_social_bp=700), frame(2, fatigue_bp=5)])
    wire = bytearray(batch.SerializeToString())
    # Frame 0 gains unknown field 40 as a group holding a varint and a nested group (40 start, 41
    # start, 1 varint, 41 end, 40 end); the batch gains one too.
    group = bytes([0xC3, 0x02, 0xCB, 0x02, 0x08, 0x07, 0xCC, 0x02, 0xC4, 0x02])
    parsed = perception_pb2.PerceptionBatch.FromString(bytes(wire))
    first = parsed.frames[0].SerializeToString() + group
    parsed.frames[0].ParseFromString(first)
    parsed.MergeFromString(group)
    python_table, python_progress = PythonRowCodec().read_rows(parsed)
    c_table, c_progress = CRowCodec().read_rows(parsed)
    np.testing.assert_array_equal(c_table, python_table)
    np.testing.assert_array_equal(c_progress, python_progress)
    assert python_table.shape == (2, 17)
