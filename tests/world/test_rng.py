"""Draw streams keyed by (seed, tick, ori, purpose): reproducible, and independent of other Ori."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from world.rng import ori_key, stream, uniform

ids = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)


@given(seed=st.integers(0, 2**63), tick=st.integers(0, 10**9), ori=ids)
def test_same_key_same_draws(seed: int, tick: int, ori: str) -> None:
    a = stream(seed, tick, ori, "wander").random(4)
    b = stream(seed, tick, ori, "wander").random(4)
    assert np.array_equal(a, b)


def test_each_key_part_changes_the_draw() -> None:
    base = stream(1, 2, "ada", "wander").random()
    assert stream(2, 2, "ada", "wander").random() != base
    assert stream(1, 3, "ada", "wander").random() != base
    assert stream(1, 2, "bo", "wander").random() != base
    assert stream(1, 2, "ada", "work").random() != base


@given(seed=st.integers(0, 2**32), tick=st.integers(0, 10**6), others=st.lists(ids, max_size=20))
def test_one_oris_dice_ignore_the_rest_of_the_population(seed: int, tick: int, others: list[str]) -> None:
    alone = uniform(seed, tick, np.array([ori_key("ada")], dtype=np.uint64), "wander")[0]
    crowd = np.array([ori_key(o) for o in [*others, "ada"]], dtype=np.uint64)
    assert uniform(seed, tick, crowd, "wander")[-1] == alone


def test_vectorised_draws_are_uniform_enough() -> None:
    keys = np.array([ori_key(f"ori-{i}") for i in range(20_000)], dtype=np.uint64)
    draws = uniform(7, 11, keys, "wander")
    assert draws.min() >= 0.0
    assert draws.max() < 1.0
    histogram, _ = np.histogram(draws, bins=10, range=(0.0, 1.0))
    assert histogram.min() > 1_700  # 2,000 expected per bin
    assert uniform(7, 12, keys, "wander").tolist() != draws.tolist()
