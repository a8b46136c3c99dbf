"""The biography's operations over a store, free of gRPC: what the servicer (and tests, benches) call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from biography_service.chain import ChainReport, ChainVerifier
from biography_service.config import BiographyConfig
from biography_service.consolidation import (
    Fold,
    Fragment,
    StateLossReport,
    consolidation_key,
    fold_by_kind,
    state_loss_report,
)
from biography_service.errors import (
    BiographyError,
    CorruptEvent,
    EventIdConflict,
    StateLossDetected,
    WrongExpectedVersion,
)
from biography_service.events import ALL_STREAMS, ANY, AppendResult, ExpectedVersion, NewEvent, RecordedEvent
from biography_service.identity import (
    IDENTITY_ATTEMPTS,
    IdentityRecorded,
    Registration,
    decide,
    recorded,
)
from biography_service.rehydration import LoadBudget, WorkingContext, rehydrate
from biography_service.store.base import AppendSignal, BiographyStore
from services.protocol_limits import STORED_INTEGER_MAX


@dataclass(frozen=True)
class Page:
    """One page of a read, and where the next page starts (None at the end)."""

    events: list[RecordedEvent]
    next_from: int | None


@dataclass(frozen=True)
class Consolidation:
    events: list[RecordedEvent]
    report: StateLossReport


class Biography:
    """Append, read, subscribe, rehydrate, consolidate and verify, over one open store."""

    def __init__(self, store: BiographyStore, config: BiographyConfig, fold: Fold = fold_by_kind) -> None:
        self.store = store
        self.config = config
        self._fold = fold

    async def append(
        self, ori_id: str, expected: ExpectedVersion, events: Sequence[NewEvent]
    ) -> AppendResult:
        return await self.store.append(ori_id, expected, events)

    async def read(self, ori_id: str, start: int | None, page_size: int, *, backward: bool = False) -> Page:
        """A page of one stream by version, or of "$all" by global position; start None = the natural end."""
        if ori_id == ALL_STREAMS:
            events = await self.store.read_all(start or 0, page_size + 1)
            following = None if len(events) <= page_size else events[page_size].global_position
            return Page(events[:page_size], following)
        if start is None:
            start = STORED_INTEGER_MAX if backward else 0
        events = await self.store.read_stream(ori_id, start, page_size + 1, backward=backward)
        following = None if len(events) <= page_size else events[page_size].stream_version
        return Page(events[:page_size], following)

    async def subscribe(
        self, from_position: int, ori_ids: Sequence[str] = ()
    ) -> AsyncIterator[tuple[RecordedEvent, bool]]:
        """Catch up from storage, then follow live appends: (event, live) pairs, no gap and no duplicate.

        Live delivery re-reads storage from the last delivered position after each wake-up, so the
        hand-over cannot skip or repeat an event, and a slow consumer costs one page of memory.
        """
        page_size = self.config.subscription_page_size
        position = from_position
        live = False
        while True:
            token = self.store.appended.token()
            page = await self.store.read_all(position, page_size, ori_ids)
            for event in page:
                yield event, live
                position = event.global_position + 1
            if len(page) < page_size:
                live = True
                if not page:
                    await AppendSignal.wait(token, self.config.subscription_poll_seconds)

    async def rehydrate(self, ori_id: str, budget: LoadBudget) -> WorkingContext:
        snapshot = await self.store.snapshot(
            ori_id, limit=budget.max_events, memory_window=self.config.recent_memory_window
        )
        return rehydrate(snapshot, budget)

    async def consolidate(self, ori_id: str, fragments: Sequence[Fragment], request_id: str) -> Consolidation:
        """Fold fragments into durable events; nothing is written when the fold would lose a fragment.

        No fragments is a consolidation with nothing pending: it writes nothing and loses nothing.
        """
        if not fragments:
            return Consolidation([], StateLossReport(True, []))
        key = request_id or consolidation_key(fragments)
        events = self._fold(ori_id, key, fragments)
        report = state_loss_report(fragments, events)
        if not report.no_state_loss:
            raise StateLossDetected(report.missing_fragment_ids)
        result = await self.store.append(ori_id, ANY, events)
        first = result.last_version - len(events) + 1
        recorded = await self.store.read_stream(ori_id, first, len(events))
        return Consolidation(recorded, report)

    async def register_identities(self, registrations: Sequence[Registration]) -> list[IdentityRecorded]:
        """Record each Ori's identity (one Ori at most once): one read of the latest identities and one
        transaction of appends; the Ori whose stream moved meanwhile are decided again from a new read.

        Raises WrongExpectedVersion when an Ori's stream kept moving for every attempt: the others are
        recorded by then, and repeating the call is safe (what is recorded answers unchanged).
        """
        answers: dict[int, IdentityRecorded] = {}
        pending = list(range(len(registrations)))
        for _ in range(IDENTITY_ATTEMPTS):
            if not pending:
                break
            heads = await self.store.identity_heads([registrations[i].ori_id for i in pending])
            appends = []
            for i in pending:
                decided = decide(registrations[i], heads.get(registrations[i].ori_id))
                if isinstance(decided, IdentityRecorded):
                    answers[i] = decided
                else:
                    appends.append((i, decided))
            outcomes = await self.store.append_many([append for _, append in appends]) if appends else []
            pending = []
            for (i, append), outcome in zip(appends, outcomes, strict=True):
                if isinstance(outcome, WrongExpectedVersion | EventIdConflict):
                    pending.append(i)  # another writer got there first: decide again from what it wrote
                elif isinstance(outcome, BiographyError):
                    raise outcome
                else:
                    answers[i] = recorded(append, outcome)
        if pending:
            ori_id = registrations[pending[0]].ori_id
            actual = await self.store.stream_version(ori_id)
            raise WrongExpectedVersion(ori_id, "the version its identity was decided from", actual)
        return [answers[i] for i in range(len(registrations))]

    async def verify_chain(self, ori_id: str) -> ChainReport:
        verifier = ChainVerifier()
        version = 0
        page_size = self.config.max_page_size
        while True:
            try:
                page = await self.store.read_stream(ori_id, version, page_size)
            except CorruptEvent as corrupt:
                # The rows before the corrupt one can still be checked.
                if corrupt.stream_version > version:
                    verifier.feed(
                        await self.store.read_stream(ori_id, version, corrupt.stream_version - version)
                    )
                verifier.corrupt(corrupt.stream_version, str(corrupt))
                return verifier.report()
            verifier.feed(page)
            if verifier.broken is not None or len(page) < page_size:
                return verifier.report()
            version = page[-1].stream_version + 1
