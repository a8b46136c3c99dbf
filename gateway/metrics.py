"""Prometheus metrics of one gateway: tokens and cost by tier and model, admissions, blocks, kills, errors."""

from __future__ import annotations

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
        self._prompt_tokens = 0
        self._cache_read_tokens = 0

    def record_call(self, tier: str, model: str, usage: Usage, micro_usd: int) -> None:
        kinds = {
            "input": usage.input_tokens,
            "output": usage.output_tokens,
            "cache_read": usage.cache_read_tokens,
            "cache_write": usage.cache_write_tokens,
        }
        for kind, count in kinds.items():
            self.tokens.labels(tier=tier, model=model, kind=kind).inc(count)
        self.cost.labels(tier=tier, model=model).inc(micro_usd)
        self.calls.labels(tier=tier, model=model).inc()
        self._prompt_tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self._cache_read_tokens += usage.cache_read_tokens
        if self._prompt_tokens:
            self.cache_read_ratio.set(self._cache_read_tokens / self._prompt_tokens)

    def exposition(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
