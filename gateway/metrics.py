"""Prometheus metrics of one gateway: tokens and cost by tier and model, admissions, blocks, kills, errors."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gateway.cost import Usage


class GatewayMetrics:
    """Counters on a registry of their own, so several gateways (tests, benchmarks) never collide."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.tokens = Counter("egbe_gateway_tokens", "Tokens billed", ["tier", "model", "kind"], registry=r)
        self.cost = Counter("egbe_gateway_cost_micro_usd", "Micro-USD spent", ["tier", "model"], registry=r)
        self.calls = Counter("egbe_gateway_model_calls", "Model calls audited", ["tier", "model"], registry=r)
        self.admissions = Counter("egbe_gateway_admissions", "Runs admitted", ["tier"], registry=r)
        self.blocked = Counter("egbe_gateway_blocked", "Runs refused", ["tier", "reason"], registry=r)
        self.kills = Counter("egbe_gateway_controls", "Operator controls applied", ["scope"], registry=r)
        self.runs_ended = Counter("egbe_gateway_runs_ended", "Runs ended", ["status"], registry=r)
        self.provider_errors = Counter(
            "egbe_gateway_provider_errors", "Provider errors by class", ["error_class"], registry=r
        )
        self.cache_read_ratio = Gauge(
            "egbe_gateway_cache_read_ratio", "Cache-read share of prompt tokens since start", registry=r
        )
        self.store_conflicts = Gauge(
            "egbe_gateway_store_conflicts",
            "Store transactions the database rolled back for a conflict with another gateway's (run again)",
            registry=r,
        )
        self._prompt_tokens = 0
        self._cache_read_tokens = 0
        # Each (tier, model)'s children, resolved once: a label lookup per counter per call cost about
        # as much as the rest of the call's metrics work.
        self._call_children: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._children_by_labels: dict[tuple[int, tuple[str, ...]], Any] = {}

    def count(self, counter: Counter, *labels: str, amount: float = 1) -> None:
        """Add to `counter`'s child of these label values (in the counter's order), resolved once: every
        admission and ending counts one."""
        key = (id(counter), labels)
        child = self._children_by_labels.get(key)
        if child is None:
            child = self._children_by_labels[key] = counter.labels(*labels)
        child.inc(amount)

    def _children(self, tier: str, model: str) -> tuple[Any, ...]:
        """(input, output, cache_read, cache_write tokens, cost, calls) children of one tier and model."""
        children = self._call_children.get((tier, model))
        if children is None:
            kinds = ("input", "output", "cache_read", "cache_write")
            children = self._call_children[(tier, model)] = (
                *(self.tokens.labels(tier=tier, model=model, kind=kind) for kind in kinds),
                self.cost.labels(tier=tier, model=model),
                self.calls.labels(tier=tier, model=model),
            )
        return children

    def record_call(self, tier: str, model: str, usage: Usage, micro_usd: int) -> None:
        inputs, outputs, cache_reads, cache_writes, cost, calls = self._children(tier, model)
        inputs.inc(usage.input_tokens)
        outputs.inc(usage.output_tokens)
        cache_reads.inc(usage.cache_read_tokens)
        cache_writes.inc(usage.cache_write_tokens)
        cost.inc(micro_usd)
        calls.inc()
        self._prompt_tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self._cache_read_tokens += usage.cache_read_tokens
        if self._prompt_tokens:
            self.cache_read_ratio.set(self._cache_read_tokens / self._prompt_tokens)

    def exposition(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
