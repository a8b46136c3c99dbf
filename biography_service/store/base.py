"""The one interface every backend implements, and the wake-up signal subscriptions wait on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from biography_service.appending import AppendRequest
from biography_service.errors import BiographyError
from biography_service.events import AppendResult, ExpectedVersion, NewEvent, RecordedEvent
from biography_service.identity import IdentityHead
from biography_service.projections import (
    SECTIONS,
    MemoryView,
    ProjectionSnapshot,
    RelationshipView,
    ValueView,
)
from biography_service.store import sql


class AppendSignal:
    """Wakes caught-up subscribers after a commit; a token taken before a read cannot miss a later one."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def token(self) -> asyncio.Event:
        return self._event

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    @staticmethod
    async def wait(token: asyncio.Event, poll_seconds: float) -> None:
        """Return when something was appended after `token` was taken, or after `poll_seconds`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(token.wait(), poll_seconds)


class BiographyStore(ABC):
    """The Ori event log and its projections; every method is atomic on its own."""

    def __init__(self) -> None:
        self.appended = AppendSignal()

    @abstractmethod
    async def open(self) -> None:
        """Connect and run pending schema migrations."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def append(
        self, ori_id: str, expected: ExpectedVersion, events: Sequence[NewEvent]
    ) -> AppendResult:
        """Append all of `events` or none (WrongExpectedVersion, EventIdConflict, StorageUnavailable)."""

    @abstractmethod
    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult | BiographyError]:
        """Several appends in one transaction, each decided in order as if it were alone.

        A refused request (WrongExpectedVersion, EventIdConflict) is that request's outcome and writes
        nothing; the others are written. StorageUnavailable when nothing could be written.
        """

    @abstractmethod
    async def _read(self, query: str, params: Sequence[object]) -> list[RecordedEvent]:
        """Run one of `store.sql`'s event queries on this backend."""

    @abstractmethod
    async def _rows(self, query: str, params: Sequence[object]) -> list[Sequence[Any]]:
        """Run one of `store.sql`'s other queries on this backend: its rows as they come."""

    async def identity_heads(self, ori_ids: Sequence[str]) -> dict[str, IdentityHead]:
        """Each listed Ori whose stream exists: its last version and its latest identity."""
        heads: dict[str, IdentityHead] = {}
        for start in range(0, len(ori_ids), sql.IDS_PER_QUERY):
            chunk = ori_ids[start : start + sql.IDS_PER_QUERY]
            for row in await self._rows(sql.identity_heads(len(chunk)), chunk):
                heads[row[0]] = IdentityHead(
                    stream_version=int(row[1]),
                    identity_version=int(row[2] or 0),
                    identity=row[3],
                    identity_stream_version=None if row[4] is None else int(row[4]),
                )
        return heads

    async def read_stream(
        self, ori_id: str, from_version: int, limit: int, *, backward: bool = False
    ) -> list[RecordedEvent]:
        query = sql.READ_BACKWARD if backward else sql.READ_FORWARD
        return await self._read(query, (ori_id, from_version, limit))

    async def read_all(
        self, from_position: int, limit: int, ori_ids: Sequence[str] = ()
    ) -> list[RecordedEvent]:
        """Events with global position >= `from_position` in global order, optionally only some streams."""
        if ori_ids:
            return await self._read(sql.read_all_for(len(ori_ids)), (from_position, *ori_ids, limit))
        return await self._read(sql.READ_ALL, (from_position, limit))

    @abstractmethod
    async def stream_version(self, ori_id: str) -> int | None: ...

    @abstractmethod
    async def snapshot(self, ori_id: str, *, limit: int, memory_window: int) -> ProjectionSnapshot:
        """The Ori's projections, at most `limit` items per section, ranked best-first."""


def build_snapshot(
    ori_id: str,
    *,
    totals: Sequence[Any],
    memories: Sequence[Sequence[Any]],
    relationships: Sequence[Sequence[Any]],
    arcs: Sequence[Sequence[Any]],
    personality: Sequence[Sequence[Any]],
    values: Sequence[Sequence[Any]],
    identity: Sequence[Sequence[Any]],
) -> ProjectionSnapshot:
    """Assemble the rows of the snapshot queries (same shape on every backend)."""
    version = None if totals[0] is None else int(totals[0])
    return ProjectionSnapshot(
        ori_id=ori_id,
        stream_version=version,
        memories=[MemoryView(r[0], _counted(r[1], int(r[4])), int(r[2]), int(r[3])) for r in memories],
        relationships=[RelationshipView(r[0], int(r[1]), int(r[2]), r[3]) for r in relationships],
        arc_refs=[r[0] for r in arcs],
        personality_events=[r[0] for r in personality],
        values=[ValueView(r[0], int(r[1])) for r in values],
        totals={name: int(count) for name, count in zip(SECTIONS, totals[1:], strict=True)},
        identity=json.loads(identity[0][1]) if identity else None,
        identity_version=int(identity[0][0]) if identity else 0,
    )


def _counted(text: str, copies: int) -> str:
    """A folded memory's text, with how many times the fact was recorded when more than once."""
    return text if copies <= 1 else f"{text} (×{copies})"
