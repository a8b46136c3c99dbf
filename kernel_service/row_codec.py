"""The row form on the wire: frames to a table and actions to intents, in Python or in C (same bytes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, perception_pb2

_FRAME = perception_pb2.PerceptionFrame.DESCRIPTOR
PROGRESS_FIELD = "goal_progress_signature"
# PerceptionFrame fields in field-number order, the progress signature (uint64) apart: the table's columns.
ROW_TABLE_FIELDS: tuple[str, ...] = tuple(
    field.name for field in sorted(_FRAME.fields, key=lambda f: f.number) if field.name != PROGRESS_FIELD
)


class RowCodec(Protocol):
    """Reads row-form frames into columns and writes intents for the row-form answer."""

    def read_rows(
        self, batch: perception_pb2.PerceptionBatch
    ) -> tuple[NDArray[np.int64], NDArray[np.uint64]]: ...

    def write_intents(
        self,
        batch: action_pb2.ActionBatch,
        slots: NDArray[np.uint32],
        columns: dict[str, NDArray[Any]],
        ori_ids: Sequence[str],
    ) -> None: ...


class PythonRowCodec:
    """Attribute by attribute; the reference the C codec must equal."""

    def read_rows(
        self, batch: perception_pb2.PerceptionBatch
    ) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        frames = batch.frames
        read = _ROW_GETTER
        table = np.array([read(f) for f in frames], dtype=np.int64).reshape(
            len(frames), len(ROW_TABLE_FIELDS)
        )
        progress = np.fromiter(
            (f.goal_progress_signature for f in frames), dtype=np.uint64, count=len(frames)
        )
        return table, progress

    def write_intents(
        self,
        batch: action_pb2.ActionBatch,
        slots: NDArray[np.uint32],
        columns: dict[str, NDArray[Any]],
        ori_ids: Sequence[str],
    ) -> None:
        lists = [columns[name][slots].tolist() for name in INTENT_FIELDS]
        intents = batch.intents
        for slot, kind, goal_ref, priority, tier, source, plan_step, reason in zip(
            slots.tolist(), *lists, strict=True
        ):
            intent = intents.add()
            intent.slot = slot
            intent.ori_id = ori_ids[slot]
            intent.kind = kind
            intent.goal_ref = goal_ref
            intent.priority = priority
            intent.tier = tier
            intent.source = source
            intent.plan_step = plan_step
            intent.tier_reason = reason


def _getter() -> Any:
    import operator

    return operator.attrgetter(*ROW_TABLE_FIELDS)


_ROW_GETTER = _getter()
# Agent-array names feeding ActionIntent fields 3..8, in field order.
INTENT_FIELDS = (
    "out_kind",
    "out_goal_ref",
    "out_priority",
    "tier",
    "out_source",
    "out_plan_step",
    "tier_reason",
)


class CRowCodec:
    """The same codec in C (moirai_rows.c): one pass over the wire bytes, no Python object per row."""

    def __init__(self) -> None:
        from kernel_service._core import ffi, lib

        self._ffi = ffi
        self._lib = lib
        self._ori_source: Sequence[str] | None = None  # the list the table was built from
        self._ori_count = -1
        self._ori_blob = b""
        self._ori_offsets = np.zeros(1, dtype=np.uint32)

    def read_rows(
        self, batch: perception_pb2.PerceptionBatch
    ) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        count = len(batch.frames)
        wire = batch.SerializeToString()
        table = np.empty((count, len(ROW_TABLE_FIELDS)), dtype=np.int64)
        progress = np.empty(count, dtype=np.uint64)
        ffi = self._ffi
        rows = self._lib.moirai_decode_rows(
            ffi.from_buffer("uint8_t[]", wire),
            len(wire),
            count,
            ffi.from_buffer("int64_t[]", table, require_writable=True),
            ffi.from_buffer("uint64_t[]", progress, require_writable=True),
        )
        if rows != count:
            raise ValueError(f"row decoder read {rows} frames of {count}")
        return table, progress

    def _ori_table(self, ori_ids: Sequence[str]) -> None:
        """Rebuilt when registration grew the list or a restore replaced it (same length or not)."""
        if ori_ids is self._ori_source and self._ori_count == len(ori_ids):
            return
        encoded = [ori_id.encode() for ori_id in ori_ids]
        self._ori_blob = b"".join(encoded) or b"\0"
        self._ori_offsets = np.zeros(len(encoded) + 1, dtype=np.uint32)
        np.cumsum([len(e) for e in encoded], out=self._ori_offsets[1:])
        self._ori_count = len(ori_ids)
        self._ori_source = ori_ids

    def write_intents(
        self,
        batch: action_pb2.ActionBatch,
        slots: NDArray[np.uint32],
        columns: dict[str, NDArray[Any]],
        ori_ids: Sequence[str],
    ) -> None:
        self._ori_table(ori_ids)
        ffi = self._ffi
        slots = np.ascontiguousarray(slots, dtype=np.uint32)
        longest = int(np.diff(self._ori_offsets).max()) if len(ori_ids) else 0
        out = bytearray(len(slots) * (64 + longest) + 16)

        def pointer(kind: str, values: NDArray[Any]) -> Any:
            return ffi.from_buffer(kind, values)

        written = self._lib.moirai_encode_intents(
            len(slots),
            pointer("uint32_t[]", slots),
            pointer("uint8_t[]", columns["out_kind"]),
            pointer("uint32_t[]", columns["out_goal_ref"]),
            pointer("uint16_t[]", columns["out_priority"]),
            pointer("uint8_t[]", columns["tier"]),
            pointer("uint8_t[]", columns["out_source"]),
            pointer("uint16_t[]", columns["out_plan_step"]),
            pointer("uint8_t[]", columns["tier_reason"]),
            ffi.from_buffer("uint8_t[]", self._ori_blob),
            pointer("uint32_t[]", self._ori_offsets),
            ffi.from_buffer("uint8_t[]", out, require_writable=True),
            len(out),
        )
        if written < 0:
            raise ValueError("intent encoder ran out of room")
        batch.MergeFromString(bytes(out[:written]))
