"""The row form on the wire: frames to a table and actions to intents, in Python or in C (same bytes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, perception_pb2
from kernel_service.agent_state import CANDIDATE_BIT_NEEDS_REHYDRATION
from kernel_service.cognition_calls import CallEstimates

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

    def write_candidates(self, result: action_pb2.TickResult, calls: Calls) -> None: ...

    def answered_slots(
        self,
        changed: NDArray[np.uint32],
        guarded: NDArray[np.uint32],
        guard_bits: NDArray[np.uint8],
        merged: NDArray[np.uint32],
        marks: NDArray[np.uint8],
    ) -> tuple[NDArray[np.integer[Any]], NDArray[np.uint8]]:
        """A delta answer's slots, ascending: the union of three ascending lists without repeats,
        with each slot's guard bits (0 when unguarded). `marks` is a zeroed byte per agent slot
        that may be used and must be left zeroed."""
        ...


@dataclass(frozen=True)
class Calls:
    """A tick's cognition calls, index for index, ready to become CognitionCallCandidate messages."""

    world_id: str
    tick: int
    slots: NDArray[np.uint32]
    causes: NDArray[np.uint8]
    tiers: NDArray[np.uint8]
    bits: NDArray[np.uint8]  # CANDIDATE_BIT_*
    estimates: CallEstimates
    routes: Mapping[int, str]  # model route by tier
    ori_ids: Sequence[str]  # by slot
    tenant_ids: Sequence[str]  # by slot


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

    def write_candidates(self, result: action_pb2.TickResult, calls: Calls) -> None:
        estimates = calls.estimates
        world, tick, ori_ids, tenant_ids = calls.world_id, calls.tick, calls.ori_ids, calls.tenant_ids
        groups = [*estimates.group_ids, ""]  # index -1: not coalesced
        add = result.candidates.add
        for slot, cause, tier, flags, tokens, cost, group in zip(
            calls.slots.tolist(),
            calls.causes.tolist(),
            calls.tiers.tolist(),
            calls.bits.tolist(),
            estimates.tokens.tolist(),
            estimates.costs.tolist(),
            estimates.group_of.tolist(),
            strict=True,
        ):
            candidate = add(
                call_id=f"{world}:{tick}:{slot}:{cause}",
                slot=slot,
                tier=tier,
                cause=cause,
                token_estimate=tokens,
                cost_estimate_micro_usd=cost,
                model_route=calls.routes[tier],
                tick=tick,
                batch_group=groups[group],
                needs_rehydration=bool(flags & CANDIDATE_BIT_NEEDS_REHYDRATION),
            )
            ori = candidate.ori
            ori.tenant_id = tenant_ids[slot]
            ori.world_id = world
            ori.ori_id = ori_ids[slot]

    def answered_slots(
        self,
        changed: NDArray[np.uint32],
        guarded: NDArray[np.uint32],
        guard_bits: NDArray[np.uint8],
        merged: NDArray[np.uint32],
        marks: NDArray[np.uint8],
    ) -> tuple[NDArray[np.integer[Any]], NDArray[np.uint8]]:
        """One byte-wide mark per agent (0 = not answered, else 1 + guard bits) does the union and
        the guard bits at once."""
        marks[changed] = 1
        marks[merged] = 1
        marks[guarded] = guard_bits + np.uint8(1)
        answered = np.flatnonzero(marks != 0)  # numpy finds nonzero bools ~4x faster than nonzero bytes
        bits = marks[answered] - np.uint8(1)
        marks[answered] = 0
        return answered, bits


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
        self._ori = _RegistryTable()
        self._tenants = _RegistryTable()
        self._routes: tuple[Mapping[int, str], StringTable] | None = None  # by the kernel's one mapping

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

    def write_intents(
        self,
        batch: action_pb2.ActionBatch,
        slots: NDArray[np.uint32],
        columns: dict[str, NDArray[Any]],
        ori_ids: Sequence[str],
    ) -> None:
        ori = self._ori.of(ori_ids)
        ffi = self._ffi
        slots = np.ascontiguousarray(slots, dtype=np.uint32)
        longest = ori.longest
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
            *self._table_pointers(ori),
            ffi.from_buffer("uint8_t[]", out, require_writable=True),
            len(out),
        )
        _check_written(written, "intent")
        batch.MergeFromString(_written(out, written))

    def write_candidates(self, result: action_pb2.TickResult, calls: Calls) -> None:
        count = len(calls.slots)
        if count == 0:
            return
        ffi = self._ffi
        ori = self._ori.of(calls.ori_ids)
        tenants = self._tenants.of(calls.tenant_ids)
        if self._routes is None or self._routes[0] is not calls.routes:
            self._routes = (calls.routes, StringTable([calls.routes.get(tier, "") for tier in range(4)]))
        routes = self._routes[1]
        groups = StringTable(calls.estimates.group_ids) if calls.estimates.group_ids else _NO_STRINGS
        world = calls.world_id.encode()
        widest = ori.longest + tenants.longest + routes.longest + groups.longest + 2 * len(world)
        out = bytearray(count * (widest + 220) + 16)
        estimates = calls.estimates

        def pointer(kind: str, values: NDArray[Any]) -> Any:
            return ffi.from_buffer(kind, np.ascontiguousarray(values))

        written = self._lib.moirai_encode_candidates(
            count,
            pointer("uint32_t[]", calls.slots.astype(np.uint32, copy=False)),
            pointer("uint8_t[]", calls.causes.astype(np.uint8, copy=False)),
            pointer("uint8_t[]", calls.tiers.astype(np.uint8, copy=False)),
            pointer("uint8_t[]", calls.bits.astype(np.uint8, copy=False)),
            pointer("int64_t[]", estimates.tokens),
            pointer("int64_t[]", estimates.costs),
            pointer("int32_t[]", estimates.group_of),
            calls.tick,
            ffi.from_buffer("uint8_t[]", world or b"\0"),
            len(world),
            *self._table_pointers(ori),
            *self._table_pointers(tenants),
            *self._table_pointers(routes),
            *self._table_pointers(groups),
            ffi.from_buffer("uint8_t[]", out, require_writable=True),
            len(out),
        )
        _check_written(written, "candidate")
        result.MergeFromString(_written(out, written))

    def answered_slots(
        self,
        changed: NDArray[np.uint32],
        guarded: NDArray[np.uint32],
        guard_bits: NDArray[np.uint8],
        merged: NDArray[np.uint32],
        marks: NDArray[np.uint8],
    ) -> tuple[NDArray[np.integer[Any]], NDArray[np.uint8]]:
        """One merge pass over the three lists in C (moirai_union_slots): no pass over every agent."""
        ffi = self._ffi
        most = len(changed) + len(guarded) + len(merged)
        answered = np.empty(most, np.uint32)
        bits = np.empty(most, np.uint8)

        def pointer(kind: str, values: NDArray[Any]) -> Any:
            return ffi.from_buffer(kind, np.ascontiguousarray(values))

        count = self._lib.moirai_union_slots(
            pointer("uint32_t[]", changed),
            len(changed),
            pointer("uint32_t[]", guarded),
            pointer("uint8_t[]", guard_bits),
            len(guarded),
            pointer("uint32_t[]", merged),
            len(merged),
            ffi.from_buffer("uint32_t[]", answered, require_writable=True),
            ffi.from_buffer("uint8_t[]", bits, require_writable=True),
        )
        return answered[:count], bits[:count]

    def _table_pointers(self, table: StringTable) -> tuple[Any, Any, int]:
        """A table's blob, offsets (as C pointers, made once per table: a registry's table lives
        until registration changes it; ~1 µs a tick each otherwise) and entry count."""
        if table.c_pointers is None:
            ffi = self._ffi
            blob, offsets = (
                ffi.from_buffer("uint8_t[]", table.blob),
                ffi.from_buffer("uint32_t[]", table.offsets),
            )
            table.c_pointers = (blob, offsets)
        return (*table.c_pointers, len(table.offsets) - 1)


def _check_written(written: int, what: str) -> None:
    """An encoder's refusal as an exception: out of room, or an index its tables do not hold (the
    encoder checks every slot, tier and group against them rather than read past one)."""
    if written == -1:
        raise ValueError(f"{what} encoder ran out of room")
    if written < 0:
        raise ValueError(f"{what} encoder met a slot, tier or group its string tables do not hold")


def _written(out: bytearray, length: int) -> bytes:
    """The encoder's output, uncopied: upb parses any buffer (its stubs say bytes)."""
    return cast(bytes, memoryview(out)[:length])


class StringTable:
    """Strings as one UTF-8 blob and offsets (entry i = blob[offsets[i]:offsets[i + 1]]), for C."""

    blob: bytes
    offsets: NDArray[np.uint32]
    longest: int
    c_pointers: tuple[Any, Any] | None = None  # CRowCodec's pointers to blob and offsets

    def __init__(self, strings: Sequence[str], after: StringTable | None = None) -> None:
        """The table of `strings`, or of `after`'s strings followed by them."""
        encoded = [string.encode() for string in strings]
        lengths = [len(e) for e in encoded]
        start = int(after.offsets[-1]) if after is not None else 0
        offsets = np.fromiter(accumulate(lengths, initial=start), dtype=np.uint32, count=len(lengths) + 1)
        blob = b"".join(encoded)
        self.longest = max(lengths, default=0)
        if after is not None:
            blob = after.blob[:start] + blob
            offsets = np.concatenate([after.offsets[:-1], offsets])
            self.longest = max(self.longest, after.longest)
        self.blob = blob or b"\0"  # never empty: cffi wants a buffer to point at
        self.offsets = offsets


_NO_STRINGS = StringTable([])


class _RegistryTable:
    """A StringTable of a registry list: extended when registration appended to the list, rebuilt
    when a restore replaced it (same length or not). At a million agents a rebuild is ~0.5 s, which a
    world registering a few agents at a time would otherwise pay on the next tick each time."""

    def __init__(self) -> None:
        self._source: Sequence[str] | None = None  # the list the table was built from
        self._count = -1
        self._table = StringTable([])

    def of(self, strings: Sequence[str]) -> StringTable:
        if strings is self._source and self._count < len(strings):
            self._table = StringTable(strings[self._count :], after=self._table)
        elif strings is not self._source or self._count != len(strings):
            self._table = StringTable(strings)
        self._source = strings
        self._count = len(strings)
        return self._table
