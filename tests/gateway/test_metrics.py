"""The gateway's metrics: counted in plain numbers, exposed as Prometheus families when scraped."""

from __future__ import annotations

import pytest

from gateway.cost import Usage
from gateway.metrics import GatewayMetrics
from tests.prometheus_samples import Samples, exposed_samples


def _samples(metrics: GatewayMetrics) -> Samples:
    return exposed_samples(metrics.exposition())


def test_counts_by_label_values_and_calls_by_token_kind_are_exposed_as_counters() -> None:
    metrics = GatewayMetrics()
    metrics.count(metrics.admissions, "clotho")
    metrics.count(metrics.admissions, "clotho")
    metrics.count(metrics.blocked, "atropos", "world_cap")
    metrics.count(metrics.runs_ended, "completed", amount=0)
    metrics.record_call("clotho", "m", Usage(input_tokens=30, output_tokens=5, cache_read_tokens=10), 7, 40)
    metrics.record_call("clotho", "m", Usage(input_tokens=60), 3, 60)
    samples = _samples(metrics)
    assert samples[("egbe_gateway_admissions_total", (("tier", "clotho"),))] == 2
    assert samples[("egbe_gateway_blocked_total", (("reason", "world_cap"), ("tier", "atropos")))] == 1
    assert samples[("egbe_gateway_runs_ended_total", (("status", "completed"),))] == 0
    tokens = {
        dict(labels)["kind"]: value
        for (name, labels), value in samples.items()
        if name == "egbe_gateway_tokens_total"
    }
    assert tokens == {"input": 90, "output": 5, "cache_read": 10, "cache_write": 0}
    assert samples[("egbe_gateway_cost_micro_usd_total", (("model", "m"), ("tier", "clotho")))] == 10
    assert samples[("egbe_gateway_model_calls_total", (("model", "m"), ("tier", "clotho")))] == 2
    assert samples[("egbe_gateway_cache_read_ratio", ())] == 10 / 100


def test_model_call_latency_is_a_histogram_by_tier_and_model() -> None:
    metrics = GatewayMetrics()
    for latency_us in (40, 1_000, 1_001, 700_000, 90_000_000):  # 1 ms is inside the 1 ms bucket
        metrics.record_call("atropos", "haiku", Usage(input_tokens=1), 0, latency_us)
    metrics.record_call("clotho", "opus", Usage(input_tokens=1), 0, 2_000_000)
    samples = _samples(metrics)
    name = "egbe_gateway_model_latency_seconds"
    atropos = (("model", "haiku"), ("tier", "atropos"))
    buckets = {
        dict(labels)["le"]: value
        for (sample, labels), value in samples.items()
        if sample == f"{name}_bucket" and dict(labels)["tier"] == "atropos"
    }
    assert buckets["0.001"] == 2
    assert buckets["0.005"] == 3
    assert buckets["0.5"] == 3
    assert buckets["1.0"] == 4
    assert buckets["60.0"] == 4
    assert buckets["+Inf"] == 5
    assert samples[(f"{name}_count", atropos)] == 5
    assert samples[(f"{name}_sum", atropos)] == pytest.approx(90.702041)
    assert samples[(f"{name}_count", (("model", "opus"), ("tier", "clotho")))] == 1


def test_a_counter_never_goes_down() -> None:
    metrics = GatewayMetrics()
    with pytest.raises(ValueError, match="egbe_gateway_admissions"):
        metrics.count(metrics.admissions, "clotho", amount=-1)
    assert ("egbe_gateway_admissions_total", (("tier", "clotho"),)) not in _samples(metrics)


def test_each_gateway_counts_on_a_registry_of_its_own() -> None:
    first, second = GatewayMetrics(), GatewayMetrics()
    first.count(first.controls, "ori")
    assert ("egbe_gateway_controls_total", (("scope", "ori"),)) in _samples(first)
    assert ("egbe_gateway_controls_total", (("scope", "ori"),)) not in _samples(second)
