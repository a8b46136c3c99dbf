"""The kernel with the behaviour layer wired in: snapshots carry it, bad registrations change nothing."""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import common_pb2, kernel_pb2
from kernel_service.behavior.emotion import EmotionalEpisode
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from services.errors import InvalidArgument
from tests.kernel_service.frames import WORLD, columns


def _registration(i: int, warmth: int = 8_000) -> kernel_pb2.AgentRegistration:
    return kernel_pb2.AgentRegistration(
        ori=common_pb2.OriRef(tenant_id="t", world_id=WORLD, ori_id=f"ori-{i}"),
        traits=kernel_pb2.PersonalityTraits(warmth_bp=warmth, playfulness_bp=7_000),
        values=[kernel_pb2.RankedValue(domain=kernel_pb2.VALUE_DOMAIN_KINSHIP, weight_bp=9_000)],
        quirks=["social:laughs loudly", "hums"],
    )


def _kernel() -> Kernel:
    return Kernel(KernelConfig(), select_core("numpy"), behavior=PersonalityBehaviorLayer())


def _batch(tick: int) -> object:
    return columns(
        tick,
        need_social_bp=np.arange(6) * 1_500,
        signal_flags=np.full(6, 1 << 5),  # player in the world: Lachesis
    )


def test_a_restored_kernel_continues_identically_with_the_behaviour_layer() -> None:
    original = _kernel()
    original.register(WORLD, [_registration(i) for i in range(6)])
    for tick in range(1, 9):
        original.tick(_batch(tick))  # type: ignore[arg-type]
    original.behavior.record_episode(2, EmotionalEpisode(-9_000, 1_000, loss=True))  # type: ignore[union-attr]
    snapshot = original.snapshot()
    assert {a.name for a in snapshot.behavior_arrays} >= {"traits", "plan_cursor", "quirks"}
    restored = _kernel()
    restored.restore(kernel_pb2.KernelSnapshot.FromString(snapshot.SerializeToString()))
    for tick in range(9, 30):
        a = original.tick(_batch(tick))  # type: ignore[arg-type]
        b = restored.tick(_batch(tick))  # type: ignore[arg-type]
        assert a.actions.SerializeToString(deterministic=True) == b.actions.SerializeToString(
            deterministic=True
        )
    assert restored.snapshot().behavior_arrays == original.snapshot().behavior_arrays


def test_an_out_of_range_trait_is_refused_before_the_kernel_changes() -> None:
    kernel = _kernel()
    kernel.register(WORLD, [_registration(0)])
    with pytest.raises(InvalidArgument) as refused:
        kernel.register(WORLD, [_registration(1), _registration(2, warmth=10_001)])
    assert [v.field for v in refused.value.violations] == ["agents[1].traits.warmth_bp"]
    assert kernel.arrays.count == 1
    assert kernel.ori_ids == ["ori-0"]
