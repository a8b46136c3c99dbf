"""What every part of the gateway's domain shares: its config, store, adapter, metrics and clock, this
process's view of controls and runs in flight (`InFlight`) and its leases of world caps (`Leases`).

The domain is built in layers over this core, each a module of its own: model calls (`calls.py`), runs
from admission to ending (`runs.py`), operator actions (`operations.py`), and the gateway with its
lifecycle and background work (`service.py`). No gRPC here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from gateway.adapters.base import ModelAdapter
from gateway.config import GatewayConfig
from gateway.inflight import InFlight, InFlightRun
from gateway.lease import Leases
from gateway.metrics import GatewayMetrics
from gateway.routing import RouteBook, config_fingerprint
from gateway.run_limits import RunLimits
from gateway.store.base import GatewayStore
from services.errors import EgbeError

if TYPE_CHECKING:
    from gateway.runs import AdmitResult

Clock = Callable[[], float]


class GatewayCore:
    """The state the gateway's layers share."""

    def __init__(
        self,
        config: GatewayConfig,
        store: GatewayStore,
        adapter: ModelAdapter,
        *,
        metrics: GatewayMetrics | None = None,
        clock: Clock = time.time,
        lease_holder: str = "",
    ) -> None:
        self.config = config
        self.store = store
        self.adapter = adapter
        self.metrics = metrics or GatewayMetrics()
        self.fingerprint = config_fingerprint(config)
        self._clock = clock
        self.inflight = InFlight(clock=self.now_ms)
        # This gateway's leases of world caps (docs/gateway.md "Durability"): the holder id must be unique
        # among live gateways sharing the store and stable across restarts (`server.lease_holder`; a
        # gateway built without one, as in-process tests do, holds as "embedded").
        self.leases = Leases(store, lease_holder or config.lease.holder or "embedded", config.lease, clock)
        # Admissions in progress by request id: a concurrent repeat waits for the first one's answer.
        self._requests: dict[str, asyncio.Future[AdmitResult]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Each tier's route under the recorded eval scores (loaded at start, reloaded when re-recorded).
        self.routes = RouteBook(config.routing, evaluated=not adapter.offline)
        self.limits = RunLimits(config)  # world caps and run budgets, as operators changed them
        self.metrics.store_conflicts = lambda: store.conflicts

    def now_ms(self) -> int:
        """This gateway's clock, Unix ms (what control expiries are checked against)."""
        return int(self._clock() * 1000)

    def _window_start_ms(self, now_ms: int) -> int:
        window = self.config.ledger_window_seconds * 1000
        return now_ms - now_ms % window

    def world_cap_tokens(self, world_id: str = "") -> int:
        """A world's cap: its operator override or the configured one, lowered by the configured homestead
        rest ('' = the configured one)."""
        return self.limits.world_cap_tokens(world_id)

    def _write_row(self, run: InFlightRun) -> None:
        """Write a fused run's admission row now (before its ending or a failed call's record), unless
        its finish took it."""
        if run.unwritten is not None:
            self.store.post_admission(run.unwritten)
            run.unwritten = None

    def _probe_soon(self) -> None:
        """Try the store once in the background (one at a time): the writer marks it healthy again as
        soon as it answers, so a passing failure closes admission for a round trip, not a lease tick."""
        if any(task.get_name() == "gateway-store-probe" for task in self._tasks):
            return
        self._in_background(self._quietly(self.store.probe), name="gateway-store-probe")

    def _in_background(self, work: Coroutine[Any, Any, object], name: str | None = None) -> None:
        """Run `work` as a task of this gateway's, kept until it ends (`stop` cancels it)."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _quietly(work: Callable[[], Awaitable[object]]) -> None:
        with contextlib.suppress(EgbeError):  # still unreachable: the next admission or tick tries again
            await work()
