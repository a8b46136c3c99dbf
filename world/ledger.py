"""The gateway's ledger as a run sees it: what it charged this world since the run began.

One definition of "tokens charged" for the whole world package: the ledger's consumed tokens for the
world, summed over every window since the run's first, minus what it held when the run started.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import grpc

from egbe.v1 import gateway_pb2
from world.artifact import TIER_NAME, TierSpend
from world.clients import ServiceClients
from world.errors import WorldRunError, describe_rpc_error

DRAIN_POLL_SECONDS = 0.25
DRAIN_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class LedgerView:
    """The gateway's ledger for one world, summed over the windows since the run started."""

    since_unix_ms: int
    world_cap_tokens: int = 0
    reserved_tokens: int = 0
    consumed_tokens: int = 0
    consumed_micro_usd: int = 0
    admissions: int = 0
    blocked_by_world_cap: int = 0
    killed: int = 0
    killed_in_flight: int = 0
    by_tier: tuple[TierSpend, ...] = ()  # audited spend by tier over the same windows

    @property
    def outcomes(self) -> int:
        """Calls the gateway has answered at admission: admitted, refused under a control, or deferred."""
        return self.admissions + self.killed - self.killed_in_flight + self.blocked_by_world_cap

    def minus(self, start: LedgerView) -> LedgerView:
        """What happened between `start` and this view (the cap and reservations are levels, kept)."""
        return replace(
            self,
            consumed_tokens=self.consumed_tokens - start.consumed_tokens,
            consumed_micro_usd=self.consumed_micro_usd - start.consumed_micro_usd,
            admissions=self.admissions - start.admissions,
            blocked_by_world_cap=self.blocked_by_world_cap - start.blocked_by_world_cap,
            killed=self.killed - start.killed,
            killed_in_flight=self.killed_in_flight - start.killed_in_flight,
        )


async def ledger_view(
    clients: ServiceClients, world_id: str, tenant_id: str, *, since_unix_ms: int
) -> LedgerView:
    """The world's ledger from the window holding `since_unix_ms` (0: the current one) to now, on the
    gateway's clock; all zero when the gateway keeps none (UNIMPLEMENTED)."""
    try:
        spend = await clients.operator.GetSpend(
            gateway_pb2.GetSpendRequest(world_id=world_id, tenant_id=tenant_id, since_unix_ms=since_unix_ms),
            metadata=clients.world_md,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise WorldRunError(describe_rpc_error("GetSpend", exc)) from exc
        return LedgerView(since_unix_ms)
    return LedgerView(
        spend.window_start_unix_ms,
        world_cap_tokens=spend.world_cap_tokens,
        reserved_tokens=spend.reserved_tokens,
        consumed_tokens=spend.consumed_tokens,
        consumed_micro_usd=spend.consumed_micro_usd,
        admissions=spend.admissions,
        blocked_by_world_cap=spend.blocked_by_world_cap,
        killed=spend.killed,
        killed_in_flight=spend.killed_in_flight,
        by_tier=tuple(
            TierSpend(
                tier=TIER_NAME.get(t.tier, "unspecified"),
                calls=t.calls,
                tokens=t.tokens,
                micro_usd=t.micro_usd,
            )
            for t in spend.by_tier
        ),
    )


async def run_share(clients: ServiceClients, world_id: str, tenant_id: str, start: LedgerView) -> LedgerView:
    """The run's share of the ledger so far: everything since `start` was read."""
    view = await ledger_view(clients, world_id, tenant_id, since_unix_ms=start.since_unix_ms)
    return view.minus(start)


async def wait_for_dispatch(
    clients: ServiceClients, world_id: str, tenant_id: str, start: LedgerView, issued: int
) -> LedgerView:
    """Wait until the gateway has answered every call the run issued and no admitted run is still in flight.

    Bounded by DRAIN_MAX_SECONDS: a call the dispatcher lost never arrives, and the bill then shows it
    as issued but unaccounted for rather than the run hanging. Returns the last view (the run's share)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_MAX_SECONDS
    while True:
        share = await run_share(clients, world_id, tenant_id, start)
        settled = share.outcomes >= issued and share.reserved_tokens == 0
        if settled or loop.time() >= deadline:
            return share
        await asyncio.sleep(DRAIN_POLL_SECONDS)
