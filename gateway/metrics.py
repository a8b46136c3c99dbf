"""Prometheus metrics of one gateway: tokens and cost by tier and model, admissions, blocks, controls,
runs they stopped, errors, and how long model calls take.

Counted into plain numbers and turned into metric families only when scraped (as the kernel's are):
prometheus_client's metric objects take a lock and check their state on every update, and a fused run
made eight of them, about 50 Python calls of the gateway's hot path (one in ten of a run's calls).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.cost import Usage

# Upper bounds (seconds) of the model-call latency buckets: from the offline adapter's tens of
# microseconds to a long Atropos summary.
LATENCY_BUCKETS_S = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LATENCY_BUCKETS_US = tuple(round(bound * 1_000_000) for bound in LATENCY_BUCKETS_S)


@dataclass(frozen=True, eq=False)
class CounterSpec:
    """A counter the gateway keeps: its name (without `_total`), help and label names."""

    name: str
    documentation: str
    labels: tuple[str, ...]


class GatewayMetrics(Collector):
    """Counts on a registry of their own, so several gateways (tests, benchmarks) never collide."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tokens = CounterSpec("egbe_gateway_tokens", "Tokens billed", ("tier", "model", "kind"))
        self.cost = CounterSpec("egbe_gateway_cost_micro_usd", "Micro-USD spent", ("tier", "model"))
        self.calls = CounterSpec("egbe_gateway_model_calls", "Model calls audited", ("tier", "model"))
        self.admissions = CounterSpec("egbe_gateway_admissions", "Runs admitted", ("tier",))
        self.blocked = CounterSpec("egbe_gateway_blocked", "Runs refused", ("tier", "reason"))
        self.controls = CounterSpec(
            "egbe_gateway_controls", "Operator controls this gateway committed", ("scope",)
        )
        self.runs_stopped = CounterSpec(
            "egbe_gateway_runs_stopped", "Runs a control stopped at a model or tool boundary", ("scope",)
        )
        self.runs_ended = CounterSpec("egbe_gateway_runs_ended", "Runs ended", ("status",))
        self.provider_errors = CounterSpec(
            "egbe_gateway_provider_errors", "Provider errors by class", ("error_class",)
        )
        self.provider_fallbacks = CounterSpec(
            "egbe_gateway_provider_fallbacks",
            "Calls that left a provider for the next of their class's route",
            ("provider",),
        )
        self.rate_limit_waits = CounterSpec(
            "egbe_gateway_rate_limit_waits",
            "Calls that waited for their turn under a provider's rate limits",
            ("provider",),
        )
        self.rate_limit_wait_seconds = CounterSpec(
            "egbe_gateway_rate_limit_wait_seconds", "Seconds calls waited for their turn", ("provider",)
        )
        self.rate_limit_deferred = CounterSpec(
            "egbe_gateway_rate_limit_deferred",
            "Calls a provider's rate limits had no turn for before their deadline",
            ("provider",),
        )
        self._specs = (
            self.tokens,
            self.cost,
            self.calls,
            self.admissions,
            self.blocked,
            self.controls,
            self.runs_stopped,
            self.runs_ended,
            self.provider_errors,
            self.provider_fallbacks,
            self.rate_limit_waits,
            self.rate_limit_wait_seconds,
            self.rate_limit_deferred,
        )
        self._counts: dict[CounterSpec, dict[tuple[str, ...], float]] = {spec: {} for spec in self._specs}
        self._prompt_tokens = 0
        self._cache_read_tokens = 0
        # (tier, model) -> count per bucket (the last one past every bound), and the sum in microseconds
        self._latency_buckets: dict[tuple[str, str], list[int]] = {}
        self._latency_sum_us: dict[tuple[str, str], int] = {}
        # Read at scrape time: the store counts its own conflicts (`GatewayCore` points this at it).
        self.store_conflicts: Callable[[], int] = lambda: 0
        self.registry.register(self)

    def count(self, counter: CounterSpec, *labels: str, amount: float = 1) -> None:
        """Add `amount` to `counter` for these label values (in the counter's label order)."""
        if amount < 0:
            raise ValueError(f"{counter.name} can only go up (asked to add {amount})")
        counts = self._counts[counter]
        counts[labels] = counts.get(labels, 0) + amount

    def record_call(self, tier: str, model: str, usage: Usage, micro_usd: int, latency_us: int) -> None:
        """A model call that answered: its tokens, cost and the adapter's time (`AdapterTiming`)."""
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            self.count(self.tokens, tier, model, kind, amount=value)
        self.count(self.cost, tier, model, amount=micro_usd)
        self.count(self.calls, tier, model)
        self._prompt_tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self._cache_read_tokens += usage.cache_read_tokens
        key = (tier, model)
        buckets = self._latency_buckets.get(key)
        if buckets is None:
            buckets = self._latency_buckets[key] = [0] * (len(_LATENCY_BUCKETS_US) + 1)
        buckets[bisect.bisect_left(_LATENCY_BUCKETS_US, latency_us)] += 1
        self._latency_sum_us[key] = self._latency_sum_us.get(key, 0) + latency_us

    def collect(self) -> Iterator[Metric]:
        for spec in self._specs:
            family = CounterMetricFamily(spec.name, spec.documentation, labels=spec.labels)
            # (the exporter's thread: `sorted` copies the counts in one step the loop's updates cannot split)
            for labels, value in sorted(self._counts[spec].items()):
                family.add_metric(labels, value)
            yield family
        yield self._latency_family()
        yield CounterMetricFamily(
            "egbe_gateway_store_conflicts",
            "Store transactions the database rolled back for a conflict with another gateway's (run again)",
            value=self.store_conflicts(),
        )
        ratio = self._cache_read_tokens / self._prompt_tokens if self._prompt_tokens else 0.0
        yield GaugeMetricFamily(
            "egbe_gateway_cache_read_ratio", "Cache-read share of prompt tokens since start", value=ratio
        )

    def _latency_family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "egbe_gateway_model_latency_seconds",
            "How long the model adapter took for a call that answered",
            labels=("tier", "model"),
        )
        for key, buckets in sorted(self._latency_buckets.items()):  # (copied in one step, as above)
            cumulative, total = [], 0
            for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), buckets, strict=True):
                total += count
                cumulative.append((str(bound) if bound != float("inf") else "+Inf", total))
            family.add_metric(key, cumulative, self._latency_sum_us[key] / 1_000_000)
        return family

    def exposition(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
