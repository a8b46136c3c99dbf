"""This gateway's leases of world caps: blocks of a world's window cap leased durably from the shared
ledger, from which runs are admitted in memory, so an admission costs no store round trip and no fsync.

The accounting (docs/gateway.md "Durability"): a ledger row's `reserved_tokens` is the sum of every
gateway's outstanding lease on it (`gateway_leases.tokens`). A lease holds what this gateway has not
given to a run (`available`) plus what its runs reserved and have not consumed yet. A call's tokens leave
the lease for `consumed_tokens` with its audit record; a run's ending hands the rest of its reservation
back to `available` (exactly what the store says its ending released, `RunEnd.lease_return`); and
`available` goes back to the ledger when the lease idles, when its window is over, when a run could not
be admitted, and when the gateway stops. So no gateway can admit tokens its lease does not hold, and the
leases together never pass the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.config import LeaseConfig
from gateway.records import LeaseCharge
from gateway.store.base import GatewayStore
from services.logging import get_logger

log = get_logger(__name__)
WindowKey = tuple[str, int]  # (world id, window start ms)


@dataclass
class _Lease:
    available: int = 0
    runs: int = 0  # reservations drawn from it and not yet handed back
    last_drawn: float = 0.0
    # Whether to lease ahead (`Leases._lease_ahead`): off once a lease came back short of a chunk, where
    # the cap is getting tight and leasing what no run asked for yet would take it from other gateways.
    ahead: bool = True


@dataclass(frozen=True)
class _Reservation:
    key: WindowKey
    tokens: int
    deadline_ms: int


class Leases:
    """Every lease this gateway holds, and the reservation of every run it admitted from one."""

    def __init__(
        self, store: GatewayStore, holder: str, config: LeaseConfig, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self.holder = holder
        self._config = config
        self._clock = clock
        self._leases: dict[WindowKey, _Lease] = {}
        self._locks: dict[WindowKey, asyncio.Lock] = {}
        self._reservations: dict[str, _Reservation] = {}
        self._recording: dict[str, int] = {}  # run id -> its calls on their way to their audit record
        self._held_back: dict[str, int] = {}  # run id -> what its ending hands back once they are recorded
        self._refill_below = config.chunk_tokens * config.refill_below_bp // 10_000  # (0: never ahead)
        self._leasing_ahead: dict[WindowKey, asyncio.Task[None]] = {}

    async def reserve(
        self, run_id: str, key: WindowKey, *, cap_tokens: int, tokens: int, deadline_ms: int, now_ms: int
    ) -> bool:
        """Reserve a run's tokens from this window's lease, leasing more first when it cannot hold them
        (and in the background when it runs low); False when the ledger has no more to lease (the run is
        deferred by the world cap)."""
        lease = self._leases.setdefault(key, _Lease())
        if lease.available < tokens:
            async with self._locks.setdefault(key, asyncio.Lock()):
                while lease.available < tokens:
                    granted = await self._lease(key, lease, tokens - lease.available, cap_tokens, now_ms)
                    if not granted:
                        # Nothing left to lease: what this lease holds is too small for the run; give it
                        # back so a gateway with a smaller run can use it.
                        await self._give_back(key, lease, now_ms)
                        return False
                self._draw(run_id, key, lease, tokens, deadline_ms)
        else:
            self._draw(run_id, key, lease, tokens, deadline_ms)
        self._lease_ahead(key, lease, cap_tokens, now_ms)
        return True

    async def _lease(self, key: WindowKey, lease: _Lease, need: int, cap_tokens: int, now_ms: int) -> int:
        """At least `need` more tokens leased from the store into `lease` (under its key's lock), or 0."""
        granted = await self._store.lease(
            self.holder,
            key,
            cap_tokens=cap_tokens,
            need=need,
            chunk=self._config.chunk_tokens,
            share_bp=self._config.share_bp,
            now_ms=now_ms,
        )
        lease.available += granted
        lease.ahead = lease.ahead and granted >= self._config.chunk_tokens
        return granted

    def _lease_ahead(self, key: WindowKey, lease: _Lease, cap_tokens: int, now_ms: int) -> None:
        """Lease the next chunk in the background once the lease holds less than `refill_below_bp` of one,
        so admissions go on drawing from memory while the store commits it. Leasing only when a run no
        longer fits stalled every admission arriving meanwhile behind one durable commit: at 5,000
        admissions a second, every 250th (a chunk of Clotho runs) held up all 64 streams, and half the
        admissions waited on the lease's lock (bench/gateway_overhead.py, docs/performance.md)."""
        if not (self._refill_below and lease.ahead) or lease.available >= self._refill_below:
            return
        if key in self._leasing_ahead:  # (one at a time)
            return
        task = asyncio.create_task(self._top_up(key, lease, cap_tokens, now_ms))
        self._leasing_ahead[key] = task
        task.add_done_callback(lambda _: self._leasing_ahead.pop(key, None))

    async def leased_ahead(self) -> None:
        """Once every lease being taken ahead is in (or failed)."""
        await asyncio.gather(*self._leasing_ahead.values())

    async def _top_up(self, key: WindowKey, lease: _Lease, cap_tokens: int, now_ms: int) -> None:
        try:
            async with self._locks.setdefault(key, asyncio.Lock()):
                if lease.available < self._refill_below:  # (a run that did not fit may have leased first)
                    await self._lease(key, lease, 1, cap_tokens, now_ms)
        except Exception as exc:  # the store is down: admissions lease when a run does not fit, as before
            log.warning("leasing ahead failed", world_id=key[0], error=str(exc))

    def _draw(self, run_id: str, key: WindowKey, lease: _Lease, tokens: int, deadline_ms: int) -> None:
        lease.available -= tokens
        lease.runs += 1
        lease.last_drawn = self._clock()
        self._reservations[run_id] = _Reservation(key, tokens, deadline_ms)

    def owns(self, run_id: str) -> bool:
        return run_id in self._reservations

    @contextlib.contextmanager
    def recording(self, run_id: str) -> Iterator[None]:
        """A call of the run is on its way to its audit record. An ending meanwhile (a kill, the sweep, a
        concurrent EndRun) hands the run's reservation back only once the call's charge is taken: were
        the tokens available first, an idle or deferred give-back could return to the ledger the very
        tokens the call's record then takes from the lease, leaving the lease below zero."""
        self._recording[run_id] = self._recording.get(run_id, 0) + 1
        try:
            yield
        finally:
            left = self._recording.pop(run_id) - 1
            if left:
                self._recording[run_id] = left
            elif run_id in self._held_back:
                self.release(run_id, self._held_back.pop(run_id))

    def release(self, run_id: str, tokens: int) -> None:
        """A run ended: `tokens` (what the store says its ending released) go back to its lease. Once;
        after the charges of its calls still being recorded (`recording`)."""
        if run_id in self._recording:
            self._held_back.setdefault(run_id, tokens)
            return
        reservation = self._reservations.pop(run_id, None)
        if reservation is None:
            return
        lease = self._leases[reservation.key]
        lease.available += tokens
        lease.runs -= 1

    def charge(self, charge: LeaseCharge | None) -> None:
        """A call of a run this gateway admitted took tokens beyond the run's reservation: they leave what
        the lease has available (which may go below zero: the next admission leases first)."""
        if charge is not None and charge.tokens:
            self._leases.setdefault(charge.key, _Lease()).available -= charge.tokens

    def strand(self, run_id: str) -> None:
        """A run whose row the store never wrote (it was down): nothing proves it made no call, so its
        reservation stays leased, never available again; the next start settles it as spent."""
        reservation = self._reservations.pop(run_id, None)
        if reservation is not None:
            self._leases[reservation.key].runs -= 1

    def expired(self, now_ms: int) -> list[str]:
        """The runs this gateway admitted whose deadline has passed (to be ended as timed out).

        A run's deadline is its admission's time plus the one run timeout, and reservations are kept in
        admission order, so they fall due oldest first: the scan stops at the first not due. A sweep then
        costs the runs it ends, not every run open (thousands, on streams that leave runs open, took the
        event loop milliseconds every sweep). A clock stepped back only delays the runs admitted after
        the step until those admitted before it are due."""
        due = []
        for run_id, reservation in self._reservations.items():
            if reservation.deadline_ms >= now_ms:
                break
            due.append(run_id)
        return due

    async def return_idle(self, *, current_window_ms: int, previous_window_ms: int, now_ms: int) -> None:
        """Give back what no admission drew on for `idle_return_seconds`, and everything of past windows;
        forget leases older than the previous window that hold nothing (no admission can still be
        waiting on one: admissions draw on the current window)."""
        idle_before = self._clock() - self._config.idle_return_seconds
        for key, lease in list(self._leases.items()):
            if key[1] != current_window_ms or lease.last_drawn < idle_before:
                await self._give_back(key, lease, now_ms)
            forgotten = not lease.runs and not lease.available and key not in self._leasing_ahead
            if key[1] < previous_window_ms and forgotten:
                del self._leases[key]
                self._locks.pop(key, None)

    async def return_all(self, now_ms: int) -> None:
        """At shutdown: give back everything available (what runs still hold stays leased), once the leases
        being taken ahead are in."""
        await self.leased_ahead()
        for key, lease in list(self._leases.items()):
            await self._give_back(key, lease, now_ms)

    async def return_world(self, world_id: str, now_ms: int) -> None:
        """Give back what this world's leases hold unreserved (its cap changed: what is leased from here on
        is leased under the new one)."""
        for key, lease in list(self._leases.items()):
            if key[0] == world_id:
                await self._give_back(key, lease, now_ms)

    async def _give_back(self, key: WindowKey, lease: _Lease, now_ms: int) -> None:
        if lease.available <= 0:
            return
        tokens, lease.available = lease.available, 0  # gone from memory first: never admitted twice
        await self._store.return_lease(self.holder, key, tokens=tokens, now_ms=now_ms)
