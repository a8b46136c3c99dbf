"""A snapshot's registry and agent arrays, decoded and checked whole before a restore changes anything.

The tick cores index with restored state (a tier picks a model route, a slot an Ori and tenant id,
a kind comes back to the world as an action), so a snapshot is held to what a kernel can itself
produce: exact dtypes and one value per agent in every array, each enum-like byte within its enum,
basis points within 0..10000, a tick the kernel may still advance from, one tenant per Ori and ids
as registration bounds them. `RestoreSnapshot` and the tick log's snapshots both come through here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.agent_state import AGENT_BIT_OBSERVED, AGENT_FIELDS, SIGNALS_MOVED_BEHAVIOR
from kernel_service.bounds import (
    MAX_ACTION_KIND,
    MAX_ACTION_SOURCE,
    MAX_BP,
    MAX_TICK,
    first_outside,
    id_violation,
    id_violations,
)
from services.errors import FieldViolation, InvalidArgument

Array = np.ndarray[tuple[int], np.dtype[np.generic]]

# Value ranges (inclusive) of the agent arrays that hold more than a free-running number.
AGENT_RANGES: dict[str, tuple[int, int]] = {
    "visual_lod": (0, max(perception_pb2.VisualLod.values())),
    "player_proximity_mm": (0, 2**31 - 1),
    "need_safety_bp": (0, MAX_BP),
    "need_sustaining_bp": (0, MAX_BP),
    "need_social_bp": (0, MAX_BP),
    "need_purpose_bp": (0, MAX_BP),
    "fatigue_bp": (0, MAX_BP),
    "tier": (0, max(common_pb2.CognitionTier.values())),
    "tier_reason": (0, max(action_pb2.TierReason.values())),
    "signals_moved": (0, 2 * SIGNALS_MOVED_BEHAVIOR - 1),
    "last_decided_kind": (0, MAX_ACTION_KIND),
    "agent_bits": (0, 2 * AGENT_BIT_OBSERVED - 1),
    "cached_kind": (0, MAX_ACTION_KIND),
    "cached_source": (0, MAX_ACTION_SOURCE),
    "cached_priority": (0, MAX_BP),
    "out_kind": (0, MAX_ACTION_KIND),
    "out_source": (0, MAX_ACTION_SOURCE),
    "out_priority": (0, MAX_BP),
}


def decode_arrays(named_arrays: Sequence[kernel_pb2.NamedArray], field: str) -> dict[str, Array]:
    """A snapshot's named arrays, refusing (by index) any that is not one little-endian numpy array
    or repeats a name."""
    decoded: dict[str, Array] = {}
    for index, named in enumerate(named_arrays):
        try:
            values = np.frombuffer(named.data, dtype=np.dtype(named.dtype)).copy()
        except (TypeError, ValueError) as exc:
            raise InvalidArgument.field(
                f"{field}[{index}]", f"not a little-endian numpy array: {exc}"
            ) from exc
        if values.ndim != 1:
            raise InvalidArgument.field(f"{field}[{index}].dtype", "must name a scalar dtype")
        if named.name in decoded:
            raise InvalidArgument.field(f"{field}[{index}].name", f"repeats {named.name!r}")
        decoded[named.name] = values
    return decoded


def registry_violations(snapshot: kernel_pb2.KernelSnapshot) -> list[FieldViolation]:
    """The world, its Ori and their tenants, as registration would have taken them; the last tick."""
    violations = id_violations("snapshot.ori_ids", snapshot.ori_ids, required=True)
    violations += id_violations("snapshot.tenant_ids", snapshot.tenant_ids)
    world = id_violation("snapshot.world_id", snapshot.world_id)
    if world is not None:
        violations.append(world)
    if len(snapshot.tenant_ids) != len(snapshot.ori_ids):
        violations.append(
            FieldViolation(
                "snapshot.tenant_ids",
                f"{len(snapshot.tenant_ids)} tenants for {len(snapshot.ori_ids)} Ori (one each)",
            )
        )
    seen: dict[str, int] = {}
    for slot, ori_id in enumerate(snapshot.ori_ids):
        if ori_id in seen:
            violations.append(
                FieldViolation(f"snapshot.ori_ids[{slot}]", f"repeats snapshot.ori_ids[{seen[ori_id]}]")
            )
        seen.setdefault(ori_id, slot)
    if snapshot.last_tick > MAX_TICK:
        violations.append(FieldViolation("snapshot.last_tick", f"must be at most {MAX_TICK}"))
    return violations


def agent_violations(arrays: dict[str, Array], agents: int) -> list[FieldViolation]:
    """Every agent array present, exactly its dtype, one value per agent, each within its range."""
    violations = [
        FieldViolation(f"snapshot.arrays.{name}", "not an array of the kernel")
        for name in arrays
        if name not in AGENT_FIELDS
    ]
    for name, dtype in AGENT_FIELDS.items():
        values = arrays.get(name)
        field = f"snapshot.arrays.{name}"
        if values is None or values.dtype != np.dtype(dtype) or len(values) != agents:
            violations.append(FieldViolation(field, f"missing or not {agents} values of {np.dtype(dtype)}"))
        elif name in AGENT_RANGES and (bad := _outside(values, name)) is not None:
            violations.append(bad)
    return violations


def _outside(values: NDArray[np.generic], name: str) -> FieldViolation | None:
    low, high = AGENT_RANGES[name]
    bad = first_outside(values, low, high)
    if bad is None:
        return None
    return FieldViolation(f"snapshot.arrays.{name}", f"value at slot {bad} is outside {low}..{high}")
