"""What the system tests share about a running cluster: starting it for one test, and its spend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses

# The system tests compare the ledger with everything a test's runs did, over minutes: the spend window
# must not roll over (and reset the ledger) in the middle, so theirs is about a century from the epoch.
ONE_LEDGER_WINDOW = {"EGBE_GATEWAY__LEDGER_WINDOW_SECONDS": str(100 * 365 * 24 * 3600)}


@contextmanager
def running_cluster(root: Path, database_url: str | None) -> Iterator[ServiceProcesses]:
    """Every service as its own process; each must exit 0 on SIGTERM when the test is done."""
    processes = ServiceProcesses(root, database_url, extra_env=dict(ONE_LEDGER_WINDOW))
    try:
        processes.start_all()
        yield processes
    finally:
        codes = processes.stop_all()
    assert all(code == 0 for code in codes.values()), codes


def spend(services: ServiceProcesses) -> gateway_pb2.GetSpendResponse:
    """The gateway's ledger as an operator reads it."""
    with grpc.insecure_channel(services.target("gateway")) as channel:
        reply: gateway_pb2.GetSpendResponse = gateway_pb2_grpc.OperatorServiceStub(channel).GetSpend(
            gateway_pb2.GetSpendRequest(), metadata=bearer_metadata(services.tokens["operator"]), timeout=10
        )
    return reply
