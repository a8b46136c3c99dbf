"""The C core and the numpy fallback produce byte-identical results and state (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, perception_pb2
from kernel_service.agent_state import AGENT_BIT_OBSERVED, MOVED_BITS, AgentArrays
from kernel_service.config import GAME_DAY_TICKS, KernelConfig
from kernel_service.core_c import CCore
from kernel_service.tick_core import NumpyCore
from kernel_service.tick_log import deterministic_digest
from services.column_layout import PERCEPTION_COLUMNS
from tests.kernel_service.frames import columns, make_kernel

configs = st.builds(
    KernelConfig,
    decision_interval_ticks=st.integers(1, 7),
    transition_damping_ticks=st.integers(0, 5),
    deescalation_grace_ticks=st.integers(0, 6),
    clotho_proximity_mm=st.sampled_from([0, 2_500, 10_000]),
    repeated_action_limit=st.integers(1, 4),
    stale_goal_tick_limit=st.integers(1, 7),
    reflection_game_minutes=st.sampled_from([1, 10]),
    summaries_per_game_day=st.sampled_from([4, 1_440, GAME_DAY_TICKS]),
)


@st.composite
def tick_sequences(draw: st.DrawFn) -> tuple[KernelConfig, int, list[dict[str, object]], bool]:
    config = draw(configs)
    agents = draw(st.integers(1, 48))
    ticks = []
    tick = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(1, 10))):
        tick += draw(st.sampled_from([0, 1, 1, 1, 2, 7, 1_199, 1_200, 500_000]))
        delta = draw(st.booleans())
        # An empty delta cannot be columnar (empty slots mean a full frame): at least one slot.
        count = draw(st.integers(1, agents)) if delta else agents
        slots = np.sort(draw(st.permutations(range(agents)))[:count]).astype(np.uint32) if delta else None
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        arrays = {
            "signal_flags": rng.integers(0, 2**8, count, dtype=np.uint16)
            & rng.integers(0, 2**8, count, dtype=np.uint16),
            "player_proximity_mm": rng.choice([0, 2_499, 2_500, 2_501, 9_999, 2**31 - 1], count).astype(
                np.int32
            ),
            "addressed_by_player_id": rng.choice([0, 0, 0, 7], count).astype(np.uint32),
            "goal_ref": rng.choice([0, 1, 2], count).astype(np.uint32),
            "goal_progress_signature": rng.choice([0, 1, 2**63], count).astype(np.uint64),
        }
        merged = [
            action_pb2.ActionIntent(
                slot=int(slot),
                kind=int(rng.choice([action_pb2.ACTION_KIND_WORK, action_pb2.ACTION_KIND_REST])),
                goal_ref=int(rng.integers(0, 2)),
                priority=int(rng.integers(0, 10_001)),
                plan_step=int(rng.integers(0, 3)),
            )
            for slot in rng.choice(agents, int(rng.integers(0, 4)))
        ]
        for need in ("need_safety_bp", "need_social_bp", "fatigue_bp"):
            arrays[need] = rng.choice([0, 2_000, 9_000], count).astype(np.uint16)
        ticks.append({"tick": tick, "slots": slots, "arrays": arrays, "merged": merged})
    return config, agents, ticks, draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tick_sequences())
def test_c_and_numpy_cores_are_byte_identical(
    case: tuple[KernelConfig, int, list[dict[str, object]], bool],
) -> None:
    config, agents, ticks, behavior = case
    kernel_c = make_kernel(agents, "c", config, behavior=behavior)
    kernel_np = make_kernel(agents, "numpy", config, behavior=behavior)
    for step in ticks:
        batch = columns(step["tick"], slots=step["slots"], **step["arrays"])  # type: ignore[arg-type]
        result_c = kernel_c.tick(batch, step["merged"])  # type: ignore[arg-type]
        result_np = kernel_np.tick(batch, step["merged"])  # type: ignore[arg-type]
        assert result_c.report.core == "c"
        assert result_np.report.core == "numpy"
        assert deterministic_digest(result_c) == deterministic_digest(result_np)
        assert kernel_c.snapshot().SerializeToString(
            deterministic=True
        ) == kernel_np.snapshot().SerializeToString(deterministic=True)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.booleans())
def test_c_and_numpy_apply_a_frame_identically(agents: int, seed: int, full: bool) -> None:
    """Every column width (1, 2, 4, 8 bytes), slots in any order (rows arrive unordered), the observed
    bit set on exactly the listed agents (none for a full frame, which observes all), and each
    column's moved bits set on exactly the agents whose value it changed."""
    rng = np.random.default_rng(seed)
    slots = None if full else rng.permutation(agents)[: int(rng.integers(1, agents + 1))].astype(np.uint32)
    listed = np.arange(agents) if slots is None else slots.astype(np.intp)
    before = {name: rng.integers(0, 3, agents, dtype=dtype) for name, dtype in PERCEPTION_COLUMNS.items()}
    # Values from the same small range: about a third repeat the value they replace.
    columns = {
        name: rng.integers(0, 3, len(listed), dtype=dtype) for name, dtype in PERCEPTION_COLUMNS.items()
    }
    bits = rng.integers(0, 8, agents, dtype=np.uint8)
    moved = rng.integers(0, 4, agents, dtype=np.uint8)
    populations = []
    for core in (CCore(), NumpyCore()):
        arrays = AgentArrays()
        arrays.add(agents)
        for name, values in before.items():
            arrays.fields[name][:agents] = values
        arrays.fields["agent_bits"][:agents] = bits
        arrays.fields["signals_moved"][:agents] = moved
        core.apply_frame(arrays, slots, columns)
        populations.append(arrays.snapshot())
    c_arrays, numpy_arrays = populations
    for name, values in c_arrays.items():
        assert values.tobytes() == numpy_arrays[name].tobytes(), name
    observed = (c_arrays["agent_bits"] & AGENT_BIT_OBSERVED) != 0
    assert np.flatnonzero(observed).tolist() == ([] if full else sorted(listed.tolist()))  # bits start < 8
    assert c_arrays["player_proximity_mm"][listed].tolist() == columns["player_proximity_mm"].tolist()
    expected = moved.copy()
    for name, bit in MOVED_BITS.items():
        expected[listed[before[name][listed] != columns[name]]] |= bit
    assert c_arrays["signals_moved"].tolist() == expected.tolist()


def test_a_due_tick_set_below_its_groups_floor_is_still_honoured() -> None:
    """The C core skips a 64-slot group whose floor (a lower bound of its due ticks) is past the tick.
    An agent falling from Lachesis (a reflection every 12,000 ticks) to Atropos (a summary every
    1,200) is due long before the rest of its group: its transition must lower the floor."""
    config = KernelConfig(reflection_game_minutes=10, summaries_per_game_day=1_440)
    kernels = [make_kernel(64, core, config) for core in ("c", "numpy")]
    nearby = np.full(64, 1 << perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD, np.uint16)
    offline = nearby.copy()
    offline[5] = 0
    summaries = {}
    for tick in range(1, 121):
        batch = columns(tick, signal_flags=nearby if tick < 100 else offline)
        result_c, result_np = (kernel.tick(batch) for kernel in kernels)
        assert deterministic_digest(result_c) == deterministic_digest(result_np), tick
        summaries[tick] = [
            c.slot for c in result_c.candidates if c.cause == action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY
        ]
    assert summaries[106] == [5]  # due 100 + 1 + slot 5 % 1,200
    assert not any(slots for tick, slots in summaries.items() if tick != 106)
