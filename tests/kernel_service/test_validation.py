"""Bad input is refused whole with INVALID_ARGUMENT naming the field; the state stays exactly as it was."""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import perception_pb2
from kernel_service.config import KernelConfig
from services.errors import InvalidArgument
from tests.kernel_service.frames import columns, frame, make_kernel, rows


def snapshot_bytes(kernel: object) -> bytes:
    return kernel.snapshot().SerializeToString(deterministic=True)  # type: ignore[attr-defined]


def ticked_kernel() -> object:
    kernel = make_kernel(4, "numpy", KernelConfig(max_batch_agents=8))
    kernel.tick(rows(10, [frame(s, player_nearby_in_world=True, goal_ref=3) for s in range(4)]))
    return kernel


def bad_column_lengths() -> perception_pb2.PerceptionBatch:
    batch = columns(11, signal_flags=np.zeros(4, np.uint16))
    batch.columns.player_proximity_mm = np.zeros(3, "<i4").tobytes()
    return batch


def slots_count_mismatch() -> perception_pb2.PerceptionBatch:
    batch = columns(11, slots=np.array([0, 1]), signal_flags=np.zeros(2, np.uint16))
    batch.columns.slots = np.array([0], "<u4").tobytes()
    return batch


CASES = {
    "unknown slot (rows)": (rows(11, [frame(0), frame(9)]), "batch.frames[1].slot"),
    "duplicate slot (rows)": (rows(11, [frame(2), frame(1), frame(2)]), "batch.frames[2].slot"),
    "negative distance (rows)": (
        rows(11, [frame(0), frame(1, player_proximity_mm=-5)]),
        "batch.frames[1].player_proximity_mm",
    ),
    "tick going backwards": (rows(9, [frame(0)]), "batch.tick"),
    "oversized batch (rows)": (rows(11, [frame(i % 4) for i in range(9)]), "batch.frames"),
    "need out of range": (rows(11, [frame(0, need_safety_bp=10_001)]), "batch.frames[0].need_safety_bp"),
    "unknown slot (delta)": (
        columns(11, slots=np.array([1, 4]), signal_flags=np.zeros(2, np.uint16)),
        "batch.columns.slots[1]",
    ),
    "duplicate slot (delta)": (
        columns(11, slots=np.array([1, 1]), signal_flags=np.zeros(2, np.uint16)),
        "batch.columns.slots[1]",
    ),
    "decreasing slots (delta)": (
        columns(11, slots=np.array([2, 1]), signal_flags=np.zeros(2, np.uint16)),
        "batch.columns.slots[1]",
    ),
    # Out of order, so the largest slot is not the last: the unknown one is still found and named.
    "unknown slot out of order (delta)": (
        columns(11, slots=np.array([9, 1]), signal_flags=np.zeros(2, np.uint16)),
        "batch.columns.slots[0]",
    ),
    "negative distance (columns)": (
        columns(11, player_proximity_mm=np.array([1, 2, -3, 4])),
        "batch.columns.player_proximity_mm",
    ),
    "mismatched column lengths": (bad_column_lengths(), "batch.columns.player_proximity_mm"),
    "slots and count disagree": (slots_count_mismatch(), "batch.columns.slots"),
    "full frame of the wrong size": (columns(11, signal_flags=np.zeros(3, np.uint16)), "batch.columns.count"),
    "oversized batch (columns)": (
        columns(11, slots=np.arange(9) % 4, signal_flags=np.zeros(9, np.uint16)),
        "batch.columns.count",
    ),
    "wrong world": (perception_pb2.PerceptionBatch(world_id="elsewhere", tick=11), "batch.world_id"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_batch_is_refused_and_nothing_changes(case: str) -> None:
    batch, field = CASES[case]
    kernel = ticked_kernel()
    before = snapshot_bytes(kernel)
    with pytest.raises(InvalidArgument) as error:
        kernel.tick(batch)  # type: ignore[attr-defined]
    assert [v.field for v in error.value.violations] == [field]
    assert snapshot_bytes(kernel) == before


def test_bad_merged_result_changes_nothing() -> None:
    from egbe.v1 import action_pb2

    kernel = ticked_kernel()
    before = snapshot_bytes(kernel)
    with pytest.raises(InvalidArgument) as error:
        kernel.tick(rows(11, [frame(0)]), [action_pb2.ActionIntent(slot=99)])  # type: ignore[attr-defined]
    assert error.value.violations[0].field == "merged_results[0].slot"
    assert snapshot_bytes(kernel) == before


def test_registration_is_idempotent_and_all_or_nothing() -> None:
    from egbe.v1 import common_pb2, kernel_pb2

    kernel = make_kernel(2)
    again = kernel.register("world-1", [kernel_pb2.AgentRegistration(ori=common_pb2.OriRef(ori_id="ori-1"))])
    assert again == [1]
    with pytest.raises(InvalidArgument) as error:
        kernel.register(
            "world-1",
            [
                kernel_pb2.AgentRegistration(ori=common_pb2.OriRef(ori_id="new")),
                kernel_pb2.AgentRegistration(ori=common_pb2.OriRef(ori_id="")),
            ],
        )
    assert error.value.violations[0].field == "agents[1].ori.ori_id"
    assert kernel.arrays.count == 2
    assert "new" not in kernel.slot_by_ori
