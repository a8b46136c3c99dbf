"""The one store interface every backend implements, assembled from its capabilities.

Each capability is written once over the shared writer (`tx.StoreCore`: group commit over a minimal
cursor) and backends supply only connections: runs (`runs.py`: admission, boundaries, calls, endings),
the ledger and its leases (`ledger.py`), controls and limits (`controls.py`), reports (`reports.py`:
operator audit, audit log, spend), providers' rate schedules (`rates.py`), and recorded eval scores
(`evals.py`). Every ledger change happens in one transaction with the check that allows it: a lease
locks the world's ledger row (PostgreSQL `FOR UPDATE`, SQLite `BEGIN IMMEDIATE`), so concurrent leases
serialize on it and the sum of reservations can never pass the cap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from gateway.store.controls import ControlStore
from gateway.store.evals import EvalScoreStore
from gateway.store.ledger import LeaseStore
from gateway.store.rates import RateStore
from gateway.store.reports import ReportStore
from gateway.store.runs import RunStore

CONTROLS_CHANNEL = "egbe_gateway_controls"


class GatewayStore(RunStore, LeaseStore, ControlStore, ReportStore, RateStore, EvalScoreStore, ABC):
    """Ledger, runs, audit log and controls; every method is one transaction; failures fail closed."""

    @abstractmethod
    async def open(self) -> None:
        """Connect and create the schema; raises when the store cannot be reached."""

    @abstractmethod
    async def close(self) -> None: ...
