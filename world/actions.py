"""Reads the kernel's answer (row or columnar ActionBatch) into per-Ori arrays in row order."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from egbe.v1 import action_pb2


class ActionDecodeError(ValueError):
    """The kernel answered actions the world cannot place (unknown slot, bad column length)."""


def decode_actions(
    batch: action_pb2.ActionBatch,
    kinds: npt.NDArray[np.uint8],
    tiers: npt.NDArray[np.uint8],
) -> npt.NDArray[np.int64]:
    """Write each answered Ori's action kind and tier in place; returns the rows answered.

    Rows not in the answer (a delta) keep what they held. Slot i is row i: the world registers in row order.
    """
    n = len(kinds)
    if batch.intents:
        rows = np.fromiter(
            (intent.slot for intent in batch.intents), dtype=np.int64, count=len(batch.intents)
        )
        if rows.size and (rows.max() >= n):
            raise ActionDecodeError(f"intent for slot {int(rows.max())} but the world has {n} Ori")
        kinds[rows] = [intent.kind for intent in batch.intents]
        tiers[rows] = [intent.tier for intent in batch.intents]
        return rows
    columns = batch.columns
    if columns.count == 0:
        return np.zeros(0, dtype=np.int64)
    if columns.slots:
        rows = np.frombuffer(columns.slots, dtype="<u4").astype(np.int64)
    else:
        rows = np.arange(columns.count, dtype=np.int64)
    kind = np.frombuffer(columns.kind, dtype="u1")
    tier = np.frombuffer(columns.tier, dtype="u1")
    if len(rows) != columns.count or len(kind) != columns.count or len(tier) != columns.count:
        raise ActionDecodeError("action columns do not hold `count` values each")
    if rows.size and rows.max() >= n:
        raise ActionDecodeError(f"action for slot {int(rows.max())} but the world has {n} Ori")
    kinds[rows] = kind
    tiers[rows] = tier
    return rows
