"""Prometheus metrics of one kernel: which core runs, tick latency against the budget, tiers, calls,
and what the dispatcher did with the calls and lifecycle work (sent, shed, failed, lost).

Operators watch the tick budget and the dispatcher from here: a tick over budget, a gateway that
refuses or sheds calls, or a consolidation that lost a fragment shows as a counter, not only a log
line. Tick figures are observed once per tick from its report; the dispatcher's counters are read
when scraped, so the dispatch path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

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


class KernelMetrics:
    """Metrics on a registry of their own, so several kernels (tests, benchmarks) never collide."""

    def __init__(self, core: str, dispatch: DispatchStats, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        Gauge("egbe_kernel_core_info", "The tick core this kernel runs", ["core"], registry=r).labels(
            core=core
        ).set(1)
        self.ticks = Counter("egbe_kernel_ticks", "Ticks answered", registry=r)
        self.over_budget = Counter(
            "egbe_kernel_ticks_over_budget", "Ticks whose own time exceeded latency_budget_micros", registry=r
        )
        self.tick_micros = Histogram(
            "egbe_kernel_tick_micros",
            "A tick's own time in microseconds",
            buckets=TICK_BUCKETS_MICROS,
            registry=r,
        )
        agents = Gauge(
            "egbe_kernel_agents", "Agents per cognition tier at the last tick", ["tier"], registry=r
        )
        # Each tier's child resolved once: observe runs after every tick.
        self._clotho, self._lachesis, self._atropos = (
            agents.labels(tier=tier) for tier in ("clotho", "lachesis", "atropos")
        )
        self.calls_issued = Counter(
            "egbe_kernel_calls_issued", "Cognition calls the ticks issued", registry=r
        )
        self.estimated_tokens = Counter(
            "egbe_kernel_estimated_tokens", "Token estimate of the issued calls", registry=r
        )
        self.guard_interventions = Counter(
            "egbe_kernel_guard_interventions", "Loop/drift guard rewrites", registry=r
        )
        r.register(_DispatchCollector(dispatch))

    def observe(self, report: action_pb2.KernelTickReport) -> None:
        self.ticks.inc()
        self.over_budget.inc(int(report.over_latency_budget))
        self.tick_micros.observe(report.elapsed_micros)
        self._clotho.set(report.clotho_count)
        self._lachesis.set(report.lachesis_count)
        self._atropos.set(report.atropos_count)
        self.calls_issued.inc(report.calls_issued)
        self.estimated_tokens.inc(report.estimated_tokens)
        self.guard_interventions.inc(report.guard_interventions)

    def exposition(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
