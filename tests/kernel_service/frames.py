"""Builders for kernels and perception batches used across the kernel tests."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from egbe.v1 import common_pb2, kernel_pb2, perception_pb2
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core

WORLD = "world-1"
FAR_MM = 2**31 - 1
CORES = ("numpy", "c")


def registrations(count: int, start: int = 0) -> list[kernel_pb2.AgentRegistration]:
    return [
        kernel_pb2.AgentRegistration(
            ori=common_pb2.OriRef(tenant_id="tenant-1", world_id=WORLD, ori_id=f"ori-{i}")
        )
        for i in range(start, start + count)
    ]


def make_kernel(
    count: int, core: str = "numpy", config: KernelConfig | None = None, *, behavior: bool = False
) -> Kernel:
    layer = PersonalityBehaviorLayer() if behavior else None
    kernel = Kernel(config or KernelConfig(), select_core(core), layer)
    kernel.register(WORLD, registrations(count))
    return kernel


def frame(slot: int, **signals: object) -> perception_pb2.PerceptionFrame:
    signals.setdefault("player_proximity_mm", FAR_MM)
    return perception_pb2.PerceptionFrame(slot=slot, **signals)  # type: ignore[arg-type]


def rows(tick: int, frames: Iterable[perception_pb2.PerceptionFrame]) -> perception_pb2.PerceptionBatch:
    return perception_pb2.PerceptionBatch(world_id=WORLD, tick=tick, frames=list(frames))


def columns(
    tick: int, slots: np.ndarray | None = None, **arrays: np.ndarray
) -> perception_pb2.PerceptionBatch:
    """A columnar batch; `slots` None = a full frame over every agent."""
    count = len(next(iter(arrays.values()))) if arrays else (0 if slots is None else len(slots))
    cols = perception_pb2.PerceptionColumns(layout_version=1, count=count)
    if slots is not None:
        cols.slots = np.asarray(slots, dtype="<u4").tobytes()
    dtypes = {
        "signal_flags": "<u2",
        "visual_lod": "u1",
        "player_proximity_mm": "<i4",
        "addressed_by_player_id": "<u4",
        "goal_ref": "<u4",
        "goal_progress_signature": "<u8",
    }
    for name, values in arrays.items():
        setattr(cols, name, np.asarray(values, dtype=dtypes.get(name, "<u2")).tobytes())
    return perception_pb2.PerceptionBatch(world_id=WORLD, tick=tick, columns=cols)


def intent_of(result: object, slot: int) -> object:
    for intent in result.actions.intents:  # type: ignore[attr-defined]
        if intent.slot == slot:
            return intent
    raise KeyError(slot)
