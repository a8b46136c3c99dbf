"""Every service's Prometheus endpoint: what the chassis counts of each RPC, beside the service's own
families, served on `metrics_ports[<service>]` at its gRPC endpoint's host.

The chassis adds to each call two integer updates in plain dicts (`RpcStats.observe`); the metric
families are built only when scraped, as the kernel does for its ticks, so a call pays no
prometheus_client lock or label check.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# RPC latency buckets in seconds: from a health check's tenth of a millisecond to a model call's minute.
RPC_BUCKETS_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)


class Counters(Collector):
    """Counter families kept as plain dicts of label values, built into families only when scraped."""

    def __init__(self, families: dict[str, tuple[str, tuple[str, ...]]]) -> None:
        self._families = families  # name (without _total) -> (help, label names)
        self._counts: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in families}

    def add(self, name: str, *labels: str, amount: float = 1) -> None:
        counts = self._counts[name]
        counts[labels] = counts.get(labels, 0) + amount

    def collect(self) -> Iterator[Metric]:
        for name, (documentation, labels) in self._families.items():
            family = CounterMetricFamily(name, documentation, labels=labels)
            for values, count in sorted(self._counts[name].items()):  # (copied in one step)
                family.add_metric(values, count)
            yield family


class Histograms(Collector):
    """One histogram family in seconds, kept as bucket counts per label values, built when scraped."""

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> None:
        self._name, self._documentation, self._labels, self._buckets = name, documentation, labels, buckets
        self._counts: dict[tuple[str, ...], list[int]] = {}
        self._sums: dict[tuple[str, ...], float] = {}

    def observe(self, seconds: float, *labels: str) -> None:
        counts = self._counts.get(labels)
        if counts is None:
            counts = self._counts[labels] = [0] * (len(self._buckets) + 1)
        counts[bisect_left(self._buckets, seconds)] += 1
        self._sums[labels] = self._sums.get(labels, 0.0) + seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labels)
        bounds = (*map(floatToGoString, self._buckets), "+Inf")
        for values, counts in sorted(self._counts.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(values, buckets, self._sums[values])
        yield family


class RpcStats(Collector):
    """Calls each RPC of one service answered, by status code, and how long they took."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._handled = Counters(
            {"egbe_rpc_handled": ("RPCs answered, by method and status code", ("service", "method", "code"))}
        )
        self._duration = Histograms(
            "egbe_rpc_duration_seconds",
            "Time from a call's arrival to its answer",
            ("service", "method"),
            RPC_BUCKETS_SECONDS,
        )

    def observe(self, method: str, code: str, seconds: float) -> None:
        self._handled.add("egbe_rpc_handled", self.service, method, code)
        self._duration.observe(seconds, self.service, method)

    def collect(self) -> Iterator[Metric]:
        yield from self._handled.collect()
        yield from self._duration.collect()


@dataclass
class MetricsEndpoint:
    """A started Prometheus endpoint and the port it took (0 asked for any free one)."""

    server: WSGIServer
    thread: Thread
    port: int

    async def stop(self) -> None:
        """Free the port (waiting out the serving loop's poll), so a restart can take it again."""
        await asyncio.to_thread(self.server.shutdown)
        self.server.server_close()


def serve_metrics(port: int, host: str, registry: CollectorRegistry) -> MetricsEndpoint:
    server, thread = start_http_server(port, host, registry)
    return MetricsEndpoint(server, thread, server.server_address[1])
