"""Prometheus metrics of one kernel: which core runs, tick latency against the budget, tiers, calls,
and what the dispatcher did with the calls and lifecycle work (sent, shed, failed, lost).

Operators watch the tick budget and the dispatcher from here: a tick over budget, a gateway that
refuses or sheds calls, or a consolidation that lost a fragment shows as a counter, not only a log
line. Tick figures are added up once per tick from its report into plain integers, and the
dispatcher's counters are kept by the dispatcher; both become metric families only when scraped,
so a tick pays a few integer additions for its metrics (prometheus_client's metric objects take a
lock and check their labels on every update: ~8 µs a tick, a tenth of a small world's tick).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from egbe.v1 import action_pb2
from kernel_service.dispatcher import DispatchStats

# Tick latency buckets in microseconds, from the C core's tens of µs to past the 50 ms budget.
TICK_BUCKETS_MICROS = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000)


class _DispatchCollector(Collector):
    """The dispatcher's counters, read at scrape time."""

    def __init__(self, stats: DispatchStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        candidates = CounterMetricFamily(
            "egbe_kernel_dispatch_candidates",
            "Cognition-call candidates by what the dispatcher did with them",
            labels=["outcome"],
        )
        for outcome, count in (
            ("offered", s.candidates_offered),
            ("reported_only", s.candidates_reported_only),
            ("sent", s.candidates_sent),
            ("shed", s.candidates_shed),
        ):
            candidates.add_metric([outcome], count)
        yield candidates
        yield CounterMetricFamily(
            "egbe_kernel_dispatch_results", "Cognition results received for merging", value=s.results_received
        )
        yield CounterMetricFamily(
            "egbe_kernel_dispatch_failures", "Gateway or biography calls that failed", value=s.failures
        )
        lifecycle = CounterMetricFamily(
            "egbe_kernel_dispatch_lifecycle", "Lifecycle requests (rehydrate, consolidate)", labels=["stage"]
        )
        lifecycle.add_metric(["offered"], s.lifecycle_offered)
        lifecycle.add_metric(["sent"], s.lifecycle_sent)
        yield lifecycle
        yield CounterMetricFamily(
            "egbe_kernel_fragments_consolidated",
            "Fragments the biography folded",
            value=s.fragments_consolidated,
        )
        yield CounterMetricFamily(
            "egbe_kernel_consolidations_with_loss",
            "Consolidations the biography reported as losing a fragment (expected: never)",
            value=s.consolidations_with_loss,
        )


class _TickCollector(Collector):
    """The ticks' figures, added up by `KernelMetrics.observe` and read at scrape time."""

    def __init__(self) -> None:
        self.ticks = 0
        self.over_budget = 0
        self.bucket_counts = [0] * (len(TICK_BUCKETS_MICROS) + 1)  # the last: above every bound
        self.micros_sum = 0
        self.tiers = (0, 0, 0)  # clotho, lachesis, atropos at the last tick
        self.calls_issued = 0
        self.estimated_tokens = 0
        self.guard_interventions = 0

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("egbe_kernel_ticks", "Ticks answered", value=self.ticks)
        yield CounterMetricFamily(
            "egbe_kernel_ticks_over_budget",
            "Ticks whose own time exceeded latency_budget_micros",
            value=self.over_budget,
        )
        cumulative, buckets = 0, []
        bounds = (*map(floatToGoString, (micros / 1e6 for micros in TICK_BUCKETS_MICROS)), "+Inf")
        for bound, count in zip(bounds, self.bucket_counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "egbe_kernel_tick_seconds",
            "A tick's own time (counted in whole microseconds)",
            buckets=buckets,
            sum_value=self.micros_sum / 1e6,
        )
        agents = GaugeMetricFamily(
            "egbe_kernel_agents", "Agents per cognition tier at the last tick", labels=["tier"]
        )
        for tier, count in zip(("clotho", "lachesis", "atropos"), self.tiers, strict=True):
            agents.add_metric([tier], count)
        yield agents
        yield CounterMetricFamily(
            "egbe_kernel_calls_issued", "Cognition calls the ticks issued", value=self.calls_issued
        )
        yield CounterMetricFamily(
            "egbe_kernel_estimated_tokens", "Token estimate of the issued calls", value=self.estimated_tokens
        )
        yield CounterMetricFamily(
            "egbe_kernel_guard_interventions", "Loop/drift guard rewrites", value=self.guard_interventions
        )


class KernelMetrics:
    """Metrics on a registry of their own, so several kernels (tests, benchmarks) never collide."""

    def __init__(
        self,
        core: str,
        dispatch: DispatchStats,
        registry: CollectorRegistry | None = None,
        *,
        tick_threads: int = 1,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        Gauge(
            "egbe_kernel_core_info",
            "The tick core this kernel runs, and its threads (kernel.tick_threads)",
            ["core", "tick_threads"],
            registry=r,
        ).labels(core=core, tick_threads=str(tick_threads)).set(1)
        self._ticks = _TickCollector()
        r.register(self._ticks)
        r.register(_DispatchCollector(dispatch))

    def observe(self, report: action_pb2.KernelTickReport) -> None:
        t = self._ticks
        micros = report.elapsed_micros
        t.ticks += 1
        t.over_budget += report.over_latency_budget
        t.bucket_counts[bisect_left(TICK_BUCKETS_MICROS, micros)] += 1
        t.micros_sum += micros
        t.tiers = (report.clotho_count, report.lachesis_count, report.atropos_count)
        t.calls_issued += report.calls_issued
        t.estimated_tokens += report.estimated_tokens
        t.guard_interventions += report.guard_interventions

    def exposition(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
