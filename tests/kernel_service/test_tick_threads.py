"""kernel.tick_threads: the C core and behaviour step over concurrent slot ranges give the single thread's
results and state byte for byte (hypothesis, with the population threshold lowered so small populations
split), the threshold keeps small populations on one range, and the setting is validated."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kernel_service.config import KernelConfig, KernelSettings
from kernel_service.kernel import Kernel
from kernel_service.slot_ranges import RANGE_ALIGN, SlotRanges
from kernel_service.tick_core import select_core
from tests.kernel_service.test_behavior_differential import configs, kernel, tick_alike


def threaded(config: KernelConfig, agents: int, seed: int, threads: int) -> Kernel:
    return kernel(select_core("c", tick_threads=threads, tick_threads_min_agents=1), config, agents, seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=configs,
    agents=st.integers(1, 5 * RANGE_ALIGN),
    ticks=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
    threads=st.integers(2, 3),
)
# Past the core's 256-slot blocks and the behaviour step's 512-slot ones, a bound off the step's stride.
@example(config=KernelConfig(lachesis_step_every_ticks=3), agents=1_100, ticks=6, seed=3, threads=2)
def test_threads_give_the_single_threads_results_and_state_byte_for_byte(
    config: KernelConfig, agents: int, ticks: int, seed: int, threads: int
) -> None:
    single, split = threaded(config, agents, seed, 1), threaded(config, agents, seed, threads)
    tick_alike(split, single, agents, ticks, seed)
    for name, values in single.arrays.fields.items():
        assert np.array_equal(values[:agents], split.arrays.fields[name][:agents]), name


def test_ranges_split_aligned_above_the_threshold_and_not_below() -> None:
    ranges = SlotRanges(2, min_agents=1_000)
    assert ranges.split(999) == [(0, 999)]
    assert ranges.split(1_000) == [(0, 448), (448, 1_000)]
    assert SlotRanges(3, min_agents=1).split(1_000) == [(0, 320), (320, 640), (640, 1_000)]
    assert SlotRanges(1, min_agents=1).split(1_000) == [(0, 1_000)]


def test_a_split_below_the_threshold_runs_one_range() -> None:
    core = select_core("c", tick_threads=2, tick_threads_min_agents=10_000)
    assert core.ranges.threads == 2
    assert core.ranges.split(10_200) == [(0, 5_056), (5_056, 10_200)]
    assert core.ranges.split(9_999) == [(0, 9_999)]


@pytest.mark.parametrize("threads", [0, -1, 17])
def test_tick_threads_out_of_range_is_refused_naming_the_field(threads: int) -> None:
    with pytest.raises(ValidationError, match="tick_threads"):
        KernelSettings(tick_threads=threads)


def test_tick_threads_min_agents_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="tick_threads_min_agents"):
        KernelSettings(tick_threads_min_agents=0)
