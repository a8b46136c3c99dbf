"""The one poll loop behind every live page: while any page watches, it reads the gateway every
`poll_interval_seconds` (ListWorlds; ListControls and each changed world's GetSpend at most once a
second) and keeps, per world, its figures, a short history and the newest calls; pages are told when a
read lands and take what they show from here.

A world's calls are pushed, not polled: while a page watches a world, one WatchAudit stream of that world
(the summary view, no context) feeds its rows. One loop and one stream a world per console, however
many browsers watch: the gateway's load from the console is bounded by the poll rate and by the calls
of the watched worlds, not by viewers. Its reads are audited once a window (`Caller.windowed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from console.clients import ConsoleClients
from console.config import ConsoleConfig
from egbe.v1 import gateway_pb2
from services.logging import get_logger
from services.vocabulary import TIER_NAMES

log = get_logger(__name__)
HISTORY_SAMPLES = 600  # one a second: ten minutes of history per world
RATE_WINDOW_SECONDS = 5.0  # calls a second are averaged over this long
TIERS_REFRESH_SECONDS = 1.0  # a world's GetSpend (calls by tier) is read at most this often
CONTROLS_REFRESH_SECONDS = 1.0  # controls on every world are read at most this often
IDLE_STOP_SECONDS = 5.0  # the loop (or its audit tail) stops this long after the last page stops watching
RESTREAM_SECONDS = 1.0  # a world's call stream the gateway ended or refused is opened again after this
ROWS_PER_MESSAGE = 50  # the newest calls a page is sent per update; the rest are counted, not sent
KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True)
class StreamRow:
    """One line of a world's live stream: a cognition call, calls refused or deferred, or a control."""

    number: int
    kind: str  # "call", "refused", "deferred" or "control"
    at_ms: int
    ori_id: str = ""
    cause: str = ""
    tier: str = ""
    outcome: str = ""
    latency_ms: float = 0.0
    micro_usd: int = 0
    source: str = ""  # "offline" or "model" (a call); empty otherwise
    model_ref: str = ""
    said: str = ""
    run_id: str = ""
    text: str = ""


def call_fields(record: gateway_pb2.AuditRecord) -> dict[str, Any]:
    """A call's stream row, from its audit record."""
    return {
        "kind": "call",
        "at_ms": record.recorded_at.ToMilliseconds(),
        "ori_id": record.ori.ori_id,
        "cause": record.cause,
        "tier": TIER_NAMES.get(record.tier, "?"),
        "outcome": record.error_class or "answered",
        "latency_ms": record.model_latency_us / 1000,
        "micro_usd": record.cost.micro_usd,
        "source": "offline" if record.offline else "model",
        "model_ref": record.model_ref,
        "said": record.utterance,
        "run_id": record.run_id,
        "text": record.policy_decision,
    }


def describe_control(control: gateway_pb2.Control) -> str:
    kind = gateway_pb2.ControlKind.Name(control.kind).removeprefix("CONTROL_KIND_")
    scope = gateway_pb2.ControlScope.Name(control.scope).removeprefix("CONTROL_SCOPE_").lower()
    where = f" in {control.world_id}" if control.world_id else ""
    return f"{kind} {scope} {control.target}{where} by {control.operator_id or '?'}: {control.reason}"


@dataclass
class WorldView:
    """What the console knows of one world."""

    world_id: str
    spend: gateway_pb2.WorldSpend = field(default_factory=gateway_pb2.WorldSpend)
    tiers: dict[str, int] = field(default_factory=dict)
    rows: deque[StreamRow] = field(default_factory=deque)
    next_row: int = 1
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))
    calls_seen: deque[tuple[float, int]] = field(default_factory=deque)
    skipped: int = 0  # calls the gateway's paced stream left out (older than those it sent), since start
    tiers_read_at: float = 0.0
    tiers_read_calls: int = -1

    def add(self, limit: int, **row: Any) -> None:
        self.rows.append(StreamRow(number=self.next_row, **row))
        self.next_row += 1
        while len(self.rows) > limit:
            self.rows.popleft()

    def calls_per_second(self) -> float:
        if len(self.calls_seen) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self.calls_seen[0], self.calls_seen[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def summary(self, global_controls: list[gateway_pb2.Control]) -> dict[str, Any]:
        spend = self.spend
        price = spend.consumed_micro_usd / spend.consumed_tokens if spend.consumed_tokens else 0.0
        controls = [*spend.active_controls, *global_controls]
        return {
            "world_id": self.world_id,
            "cap_tokens": spend.world_cap_tokens,
            "consumed_tokens": spend.consumed_tokens,
            "reserved_tokens": spend.reserved_tokens,
            "usd": spend.consumed_micro_usd / 1e6,
            "cap_usd": spend.world_cap_tokens * price / 1e6,
            "calls": spend.calls,
            "calls_per_s": round(self.calls_per_second(), 2),
            "admissions": spend.admissions,
            "killed": spend.killed,
            "blocked": spend.blocked_by_world_cap,
            "tiers": dict(self.tiers),
            "controls": [describe_control(c) for c in controls],
        }

    def sample(self, now: float) -> None:
        """A point of the world's history, at most one a second."""
        if self.spend.world_id and (not self.history or now - self.history[-1]["t"] >= 1.0):
            self.history.append(
                {
                    "t": round(now, 3),
                    "tokens": self.spend.consumed_tokens,
                    "cap": self.spend.world_cap_tokens,
                    "usd": self.spend.consumed_micro_usd / 1e6,
                    "tiers": dict(self.tiers),
                }
            )

    def rows_after(self, number: int) -> list[dict[str, Any]]:
        return [asdict(row) for row in self.rows if row.number > number]


class Watch:
    """The shared poll loop and what it has read; started by the first watcher, stopped after the last."""

    def __init__(self, clients: ConsoleClients, config: ConsoleConfig) -> None:
        self._clients = clients
        self._config = config
        self.worlds: dict[str, WorldView] = {}
        self.global_controls: list[gateway_pb2.Control] = []
        self.error = ""
        self.polls = 0
        self._watchers = 0
        self._call_watchers: Counter[str] = Counter()  # pages watching each world's calls
        self._task: asyncio.Task[None] | None = None
        self._landed = asyncio.Event()
        self._wake = asyncio.Event()
        self._controls_read_at = 0.0
        self._controls_due = False
        self._call_streams: dict[str, asyncio.Task[None]] = {}  # a WatchAudit stream per watched world
        self._calls_watched_at: dict[str, float] = {}  # when each world's calls were last watched

    # -- watching ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def watching(self, calls_of: str = "") -> Iterator[None]:
        """Hold the loop running while inside; with `calls_of` a world, that world's call stream too. The
        Worlds page alone needs no audit record, so none is streamed for it."""
        self._watchers += 1
        if calls_of:
            self._call_watchers[calls_of] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="console-watch")
        try:
            yield
        finally:
            self._watchers -= 1
            if calls_of:
                self._call_watchers[calls_of] -= 1

    async def landed(self, within_seconds: float) -> bool:
        """Wait for the next poll to land (True) or for `within_seconds` (False)."""
        event = self._landed
        try:
            await asyncio.wait_for(event.wait(), within_seconds)
        except TimeoutError:
            return False
        return True

    def poll_now(self) -> None:
        """Poll, controls included, without waiting out the interval (after a control, so its effect
        shows at once)."""
        self._controls_due = True
        self._wake.set()

    async def updates(self, world_id: str | None, after_row: int) -> AsyncIterator[dict[str, Any] | None]:
        """What a page shows, after each poll that changed it: every world's summary (world_id None) or
        one world's summary, history sample and new rows; None to keep the stream alive when nothing
        changed for KEEPALIVE_SECONDS."""
        last: dict[str, Any] | None = None
        sent_at = time.monotonic()
        skipped = self._skipped(world_id)
        with self.watching(calls_of=world_id or ""):
            while True:
                landed = await self.landed(KEEPALIVE_SECONDS)
                update = self._update_for(world_id, after_row, skipped) if landed else last
                if update == last:  # nothing new: a page is told only of changes, or kept alive
                    if time.monotonic() - sent_at >= KEEPALIVE_SECONDS:
                        sent_at = time.monotonic()
                        yield None
                    continue
                assert update is not None
                last, sent_at = update, time.monotonic()
                rows = update.get("rows")
                if rows:
                    after_row = rows[-1]["number"]
                skipped = self._skipped(world_id)
                yield update

    def _skipped(self, world_id: str | None) -> int:
        view = self.worlds.get(world_id) if world_id else None
        return view.skipped if view is not None else 0

    def _update_for(self, world_id: str | None, after_row: int, skipped_before: int) -> dict[str, Any]:
        """What a page is sent: every world's summary, or one world's with its rows after `after_row`
        (and how many calls it is not sent: rows past the newest ROWS_PER_MESSAGE, and calls the gateway
        left out since the page's last update, when it was at `skipped_before`)."""
        if world_id is None:
            return {"worlds": self.summaries(), "error": self.error}
        view = self.worlds.get(world_id)
        if view is None:
            return {"world": None, "error": self.error}
        rows = view.rows_after(after_row)
        return {
            "world": view.summary(self.global_controls),
            "sample": view.history[-1] if view.history else None,
            "rows": rows[-ROWS_PER_MESSAGE:],
            "unsent": max(0, len(rows) - ROWS_PER_MESSAGE) + view.skipped - skipped_before,
            "error": self.error,
        }

    def summaries(self) -> list[dict[str, Any]]:
        """Every world of the ledger's current window (not those only older audit records name)."""
        return [
            self.worlds[w].summary(self.global_controls)
            for w in sorted(self.worlds)
            if self.worlds[w].spend.world_id
        ]

    async def close(self) -> None:
        for task in [self._task, *self._call_streams.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -- polling ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        idle_since: float | None = None
        while True:
            if self._watchers == 0:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > IDLE_STOP_SECONDS:
                    return
            else:
                idle_since = None
            try:
                await self.poll()
                self.error = ""
            except grpc.aio.AioRpcError as error:
                self.error = f"the gateway did not answer: {error.code().name}: {error.details()}"
                log.warning("console poll failed", code=error.code().name)
            except Exception as error:  # the loop outlives one bad poll; every page shows why
                self.error = f"the console could not read the gateway: {error!r}"
                log.exception("console poll failed")
            landed, self._landed = self._landed, asyncio.Event()
            landed.set()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._config.poll_interval_seconds)

    def view(self, world_id: str) -> WorldView:
        view = self.worlds.get(world_id)
        if view is None:
            view = self.worlds[world_id] = WorldView(world_id)
        return view

    async def poll(self) -> None:
        """One read of the gateway: worlds and controls, calls by tier; the watched worlds' call streams
        opened, and closed IDLE_STOP_SECONDS after their last page left."""
        reader, now = self._clients.reader, time.time()
        worlds = await self._clients.worlds(reader)
        if self._controls_due or now - self._controls_read_at >= CONTROLS_REFRESH_SECONDS:
            # Controls on every world (ListWorlds lists each world's own with it); they change rarely.
            self.global_controls = [
                c
                for c in await self._clients.controls(reader)
                if not c.world_id and c.scope != gateway_pb2.CONTROL_SCOPE_WORLD
            ]
            self._controls_read_at, self._controls_due = now, False
        self._follow_calls(now)
        for spend in worlds:
            self._update(self.view(spend.world_id), spend, now)
        await self._refresh_tiers(now)
        for view in self.worlds.values():
            view.sample(now)
        self.polls += 1

    def _follow_calls(self, now: float) -> None:
        for world_id, pages in self._call_watchers.items():
            if pages > 0:
                self._calls_watched_at[world_id] = now
                if world_id not in self._call_streams:
                    self._call_streams[world_id] = asyncio.create_task(
                        self._stream_calls(world_id), name=f"console-calls-{world_id}"
                    )
        for world_id in [w for w, at in self._calls_watched_at.items() if now - at > IDLE_STOP_SECONDS]:
            del self._calls_watched_at[world_id]
            self._call_watchers.pop(world_id, None)
            stream = self._call_streams.pop(world_id, None)
            if stream is not None:  # (opened again from the newest rows when watched again)
                stream.cancel()

    async def _stream_calls(self, world_id: str) -> None:
        """A world's calls as the gateway writes them, paced to the poll: first its newest, then once a
        poll interval at most the ROWS_PER_MESSAGE newest written since (what a page is sent of them;
        the older ones are counted, `WorldView.skipped`); opened again where it stopped when the gateway
        ends it."""
        view, rows = self.view(world_id), self._config.stream_rows
        pace = {
            "max_records": ROWS_PER_MESSAGE,
            "min_interval_ms": round(self._config.poll_interval_seconds * 1000),
        }
        request = gateway_pb2.WatchAuditRequest(world_id=world_id, newest=ROWS_PER_MESSAGE, **pace)
        while True:
            try:
                async for message in self._clients.operator.WatchAudit(
                    request, metadata=self._clients.reader.metadata()
                ):
                    if message.lagged:  # (the gateway read on from its store: no call is missed)
                        log.info("console call stream fell behind the gateway's fan-out", world_id=world_id)
                    for record in message.records:
                        view.add(rows, **call_fields(record))
                    view.skipped += message.skipped
                    request = gateway_pb2.WatchAuditRequest(world_id=world_id, after_seq=message.seq, **pace)
            except grpc.aio.AioRpcError as error:
                self.error = f"the gateway's call stream stopped: {error.code().name}: {error.details()}"
                log.warning("console call stream stopped", code=error.code().name, world_id=world_id)
            await asyncio.sleep(RESTREAM_SECONDS)

    def _update(self, view: WorldView, spend: gateway_pb2.WorldSpend, now: float) -> None:
        """New figures for a world; calls refused by a control or deferred by the cap since the last poll
        become stream rows (the gateway counts them; it lists no record of them)."""
        before = view.spend
        first = not before.world_id
        view.spend = spend
        limit = self._config.stream_rows
        if not first and spend.killed > before.killed:
            controls = [*spend.active_controls, *self.global_controls]
            oris = {c.target for c in controls if c.scope == gateway_pb2.CONTROL_SCOPE_ORI}
            view.add(
                limit,
                kind="refused",
                at_ms=int(now * 1000),
                ori_id=next(iter(oris)) if len(oris) == 1 else "",
                outcome="killed",
                text=f"{spend.killed - before.killed} call(s) refused or stopped under: "
                + ("; ".join(describe_control(c) for c in controls) or "a control since lifted"),
            )
        if not first and spend.blocked_by_world_cap > before.blocked_by_world_cap:
            view.add(
                limit,
                kind="deferred",
                at_ms=int(now * 1000),
                outcome="deferred",
                text=f"{spend.blocked_by_world_cap - before.blocked_by_world_cap} call(s) deferred: "
                f"the world cap of {spend.world_cap_tokens:,} tokens cannot hold them",
            )
        view.calls_seen.append((now, spend.calls))
        while view.calls_seen and now - view.calls_seen[0][0] > RATE_WINDOW_SECONDS:
            view.calls_seen.popleft()

    async def _refresh_tiers(self, now: float) -> None:
        """Calls by tier for each world whose calls changed, at most once a second each."""
        due = [
            v
            for v in self.worlds.values()
            if v.spend.world_id
            and v.spend.calls != v.tiers_read_calls
            and now - v.tiers_read_at >= TIERS_REFRESH_SECONDS
        ]
        answers = await asyncio.gather(
            *(
                self._clients.operator.GetSpend(
                    gateway_pb2.GetSpendRequest(world_id=v.world_id),
                    metadata=self._clients.reader.metadata(),
                    timeout=5.0,
                )
                for v in due
            )
        )
        for view, spend in zip(due, answers, strict=True):
            view.tiers = {TIER_NAMES.get(t.tier, "?"): t.calls for t in spend.by_tier}
            view.tiers_read_at, view.tiers_read_calls = now, view.spend.calls

    def note_control(self, world_id: str, text: str) -> None:
        """A control sent from this console, shown in its world's stream at once."""
        if world_id:
            self.view(world_id).add(
                self._config.stream_rows, kind="control", at_ms=int(time.time() * 1000), text=text
            )
        self.poll_now()
