"""Decodes and validates a PerceptionBatch (row or columnar, full or delta) without touching state."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import perception_pb2
from kernel_service.bounds import MAX_TICK
from kernel_service.row_codec import ROW_TABLE_FIELDS, RowCodec
from kernel_service.situations import NO_SITUATIONS, Situations, check_situations
from services.column_layout import (
    LAYOUT_VERSION,
    MAX_BASIS_POINTS,
    NEED_COLUMNS,
    PERCEPTION_COLUMNS,
    PERCEPTION_FLAG_BITS,
    SLOT_DTYPE,
)
from services.errors import InvalidArgument


class Encoding(enum.Enum):
    """The form a batch arrived in; the answer uses the same one."""

    ROWS = "rows"
    COLUMNS_FULL = "columns"
    COLUMNS_DELTA = "delta"


@dataclass(frozen=True)
class DecodedBatch:
    """A validated batch: which slots it covers (None = every agent, row i = slot i), its columns, and
    its situation text (any encoding; most batches carry none)."""

    encoding: Encoding
    tick: int
    slots: NDArray[np.uint32] | None
    columns: dict[str, NDArray[Any]]  # only the columns the batch carried; views of the wire bytes
    situations: Situations = NO_SITUATIONS


def decode_batch(
    batch: perception_pb2.PerceptionBatch,
    *,
    world_id: str,
    registered: int,
    last_tick: int | None,
    max_agents: int,
    row_codec: RowCodec,
) -> DecodedBatch:
    """Validate the whole batch; raise InvalidArgument naming the field before anything is applied."""
    if world_id and batch.world_id and batch.world_id != world_id:
        raise InvalidArgument.field("batch.world_id", f"this kernel serves world {world_id!r}")
    if batch.tick > MAX_TICK:
        raise InvalidArgument.field("batch.tick", f"must be at most {MAX_TICK}")
    if last_tick is not None and batch.tick < last_tick:
        raise InvalidArgument.field("batch.tick", f"tick {batch.tick} goes backwards (last {last_tick})")
    if batch.frames and batch.HasField("columns"):
        raise InvalidArgument.field("batch", "set exactly one of frames or columns")
    if batch.HasField("columns"):
        decoded = _decode_columns(batch.columns, batch.tick, registered, max_agents)
    else:
        decoded = _decode_rows(batch, registered, max_agents, row_codec)
    if batch.situations:
        decoded = replace(decoded, situations=check_situations(batch.situations, registered))
    return decoded


def _check_slots(
    slots: NDArray[np.uint32], field: str, registered: int, *, ordered: bool, suffix: str = ""
) -> None:
    if len(slots) == 0:
        return
    # Strictly increasing slots (a delta's) end with their largest: one compare pass, no widening.
    increasing = slots[1:] > slots[:-1] if ordered else None
    in_order = increasing is not None and bool(increasing.all())
    if int(slots[-1] if in_order else slots.max()) >= registered:
        bad = int(np.flatnonzero(slots >= registered)[0])
        raise InvalidArgument.field(f"{field}[{bad}]{suffix}", f"unknown slot {int(slots[bad])}")
    if increasing is not None:
        if not in_order:
            bad = int(np.flatnonzero(~increasing)[0]) + 1
            what = "duplicate slot" if slots[bad] == slots[bad - 1] else "slots must be strictly increasing"
            raise InvalidArgument.field(f"{field}[{bad}]{suffix}", f"{what} {int(slots[bad])}")
        return
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    duplicates = np.flatnonzero(sorted_slots[1:] == sorted_slots[:-1])
    if len(duplicates):
        bad = int(order[duplicates[0] + 1])
        raise InvalidArgument.field(
            f"{field}[{bad}]{suffix}", f"duplicate slot {int(slots[bad])} in one batch"
        )


def _check_values(columns: dict[str, NDArray[Any]], prefix: str, indexed: bool) -> None:
    def name(column: str, row: int) -> str:
        return f"{prefix}[{row}].{column}" if indexed else f"{prefix}.{column}"

    proximity = columns.get("player_proximity_mm")
    if proximity is not None and len(proximity) and int(proximity.min()) < 0:
        row = int(np.flatnonzero(proximity < 0)[0])
        raise InvalidArgument.field(name("player_proximity_mm", row), "distance must be >= 0")
    lod = columns.get("visual_lod")
    if (
        lod is not None
        and len(lod)
        and (int(lod.max()) > perception_pb2.VISUAL_LOD_NEAR or int(lod.min()) < 0)
    ):
        row = int(np.flatnonzero((lod > perception_pb2.VISUAL_LOD_NEAR) | (lod < 0))[0])
        raise InvalidArgument.field(name("visual_lod", row), "unknown VisualLod")
    for need in NEED_COLUMNS:
        values = columns.get(need)
        if values is not None and len(values) and int(values.max()) > MAX_BASIS_POINTS:
            row = int(np.flatnonzero(values > MAX_BASIS_POINTS)[0])
            raise InvalidArgument.field(name(need, row), "basis points must be within 0..10000")


def _decode_columns(
    columns: perception_pb2.PerceptionColumns, tick: int, registered: int, max_agents: int
) -> DecodedBatch:
    if columns.layout_version != LAYOUT_VERSION:
        raise InvalidArgument.field("batch.columns.layout_version", f"must be {LAYOUT_VERSION}")
    count = columns.count
    if count > max_agents:
        raise InvalidArgument.field("batch.columns.count", f"{count} agents exceeds the maximum {max_agents}")
    slots: NDArray[np.uint32] | None = None
    if columns.slots:
        if len(columns.slots) != 4 * count:
            raise InvalidArgument.field(
                "batch.columns.slots", f"holds {len(columns.slots) // 4} slots, count is {count}"
            )
        slots = np.frombuffer(columns.slots, dtype=SLOT_DTYPE)
        _check_slots(slots, "batch.columns.slots", registered, ordered=True)
    elif count != registered:
        raise InvalidArgument.field(
            "batch.columns.count", f"a full frame covers all {registered} registered agents, got {count}"
        )
    decoded: dict[str, NDArray[Any]] = {}
    for name, dtype in PERCEPTION_COLUMNS.items():
        raw: bytes = getattr(columns, name)
        if not raw:
            continue
        if len(raw) != count * dtype.itemsize:
            raise InvalidArgument.field(
                f"batch.columns.{name}", f"{len(raw)} bytes; {count} agents need {count * dtype.itemsize}"
            )
        decoded[name] = np.frombuffer(raw, dtype=dtype)
    _check_values(decoded, "batch.columns", indexed=False)
    encoding = Encoding.COLUMNS_FULL if slots is None else Encoding.COLUMNS_DELTA
    return DecodedBatch(encoding, tick, slots, decoded)


def _decode_rows(
    batch: perception_pb2.PerceptionBatch, registered: int, max_agents: int, row_codec: RowCodec
) -> DecodedBatch:
    count = len(batch.frames)
    if count > max_agents:
        raise InvalidArgument.field("batch.frames", f"{count} frames exceeds the maximum {max_agents}")
    table, progress = row_codec.read_rows(batch)
    column = {name: table[:, index] for index, name in enumerate(ROW_TABLE_FIELDS)}
    slots = column["slot"].astype(np.uint32)
    _check_slots(slots, "batch.frames", registered, ordered=False, suffix=".slot")
    flags = np.zeros(count, dtype=np.uint16)
    for attribute, bit in PERCEPTION_FLAG_BITS.items():
        flags[column[attribute] != 0] |= np.uint16(1 << bit)
    wide = {name: column[name] for name in PERCEPTION_COLUMNS if name in column}
    _check_values(wide, "batch.frames", indexed=True)
    decoded: dict[str, NDArray[Any]] = {
        name: values.astype(PERCEPTION_COLUMNS[name]) for name, values in wide.items()
    }
    decoded["signal_flags"] = flags
    decoded["goal_progress_signature"] = progress
    return DecodedBatch(Encoding.ROWS, batch.tick, slots, decoded)
