"""Providers' request and token rates, shared by every gateway on the store.

Each limited provider has one row: for requests and for tokens, the time its schedule is booked up to
(the generic cell rate algorithm's "theoretical arrival time", in Unix microseconds). A call costs one
request and its tokens, each unit `60 s / limit` of the schedule. A call may start once neither
schedule is booked more than the provider's burst ahead of it, and books its cost from there: a
provider is paced at its limit, and after an idle spell takes up to a burst's worth at once (so any
minute holds at most `limit x (60 s + burst) / 60 s` units, plus the last call's). A call that cannot
start within the wait it is allowed books nothing: it is deferred, and the next call finds the schedule
as it was.

The row is read and written in one transaction serialized on the provider (PostgreSQL: an advisory
lock; SQLite: its single writer), so gateways sharing the store share one schedule. It is not durable
(`transact(durable=False)`): a crash can forget the last bookings, which at worst lets one more burst
through.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.tx import StoreCore, Tx

MINUTE_US = 60_000_000


@dataclass(frozen=True)
class RateLimit:
    """A provider's limits per minute (0: that one is not limited), and how far ahead of now its
    schedule may be booked before a call waits."""

    requests_per_minute: int
    tokens_per_minute: int
    burst_us: int


@dataclass(frozen=True)
class RateTurn:
    """When a call may leave: after `wait_us`, booked (`granted`), or not within the wait it was allowed
    (then nothing was booked and `wait_us` says how long it would have had to wait)."""

    wait_us: int
    granted: bool


def rate_turn(
    booked: tuple[int, int], limit: RateLimit, *, tokens: int, now_us: int, max_wait_us: int
) -> tuple[RateTurn, tuple[int, int]]:
    """A call's turn under `limit`, given the (requests, tokens) bookings; the bookings after it."""
    dimensions = [
        (index, units, per_minute)
        for index, (units, per_minute) in enumerate(
            ((1, limit.requests_per_minute), (tokens, limit.tokens_per_minute))
        )
        if per_minute
    ]
    start = max([now_us, *(booked[index] - limit.burst_us for index, _, _ in dimensions)])
    if start - now_us > max_wait_us:
        return RateTurn(start - now_us, granted=False), booked
    after = list(booked)
    for index, units, per_minute in dimensions:
        # (ceiling: a unit never costs less than its share of the minute)
        after[index] = max(booked[index], start) + -(-units * MINUTE_US // per_minute)
    return RateTurn(start - now_us, granted=True), (after[0], after[1])


class RateStore(StoreCore):
    """Providers' rate schedules (`rate_turn`), shared through the store."""

    async def take_rate_turn(
        self, provider: str, limit: RateLimit, *, tokens: int, now_us: int, max_wait_us: int
    ) -> RateTurn:
        """Book a call on `provider`'s schedule if it can start within `max_wait_us`."""

        async def body(tx: Tx) -> RateTurn:
            tx.serialize([f"rate:{provider}"])
            row = await tx.one(
                "SELECT requests_booked_us, tokens_booked_us FROM gateway_provider_rates WHERE provider = ?",
                (provider,),
            )
            booked = (int(row[0]), int(row[1])) if row is not None else (0, 0)
            turn, after = rate_turn(booked, limit, tokens=tokens, now_us=now_us, max_wait_us=max_wait_us)
            if turn.granted:
                tx.execute(
                    "INSERT INTO gateway_provider_rates (provider, requests_booked_us, tokens_booked_us)"
                    " VALUES (?, ?, ?) ON CONFLICT (provider) DO UPDATE SET"
                    " requests_booked_us = excluded.requests_booked_us,"
                    " tokens_booked_us = excluded.tokens_booked_us",
                    (provider, *after),
                )
            return turn

        return await self.transact(body, durable=False)
