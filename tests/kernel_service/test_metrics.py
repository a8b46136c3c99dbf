"""The kernel's metrics: tick reports added up per tick, read as Prometheus families when scraped."""

from __future__ import annotations

import pytest

from egbe.v1 import action_pb2
from kernel_service.dispatcher import DispatchStats
from kernel_service.metrics import KernelMetrics
from tests.prometheus_samples import Samples, exposed_samples


def samples(metrics: KernelMetrics) -> Samples:
    return exposed_samples(metrics.exposition())


def test_tick_reports_become_counters_gauges_and_a_latency_histogram() -> None:
    metrics = KernelMetrics("c", DispatchStats(), tick_threads=2)
    for elapsed, clotho in ((40, 3), (50, 4), (51, 5), (60_000, 6)):
        metrics.observe(
            action_pb2.KernelTickReport(
                elapsed_micros=elapsed,
                over_latency_budget=elapsed > 50_000,
                clotho_count=clotho,
                lachesis_count=10,
                atropos_count=1,
                calls_issued=2,
                estimated_tokens=100,
                guard_interventions=1,
            )
        )
    got = samples(metrics)
    assert got[("egbe_kernel_core_info", (("core", "c"), ("tick_threads", "2")))] == 1
    assert got[("egbe_kernel_ticks_total", ())] == 4
    assert got[("egbe_kernel_ticks_over_budget_total", ())] == 1
    assert got[("egbe_kernel_tick_seconds_bucket", (("le", "5e-05"),))] == 2  # le is inclusive
    assert got[("egbe_kernel_tick_seconds_bucket", (("le", "0.0001"),))] == 3
    assert got[("egbe_kernel_tick_seconds_bucket", (("le", "0.05"),))] == 3
    assert got[("egbe_kernel_tick_seconds_bucket", (("le", "+Inf"),))] == 4
    assert got[("egbe_kernel_tick_seconds_count", ())] == 4
    assert got[("egbe_kernel_tick_seconds_sum", ())] == pytest.approx((40 + 50 + 51 + 60_000) / 1e6)
    assert got[("egbe_kernel_agents", (("tier", "clotho"),))] == 6  # the last tick's
    assert got[("egbe_kernel_agents", (("tier", "lachesis"),))] == 10
    assert got[("egbe_kernel_calls_issued_total", ())] == 8
    assert got[("egbe_kernel_estimated_tokens_total", ())] == 400
    assert got[("egbe_kernel_guard_interventions_total", ())] == 4
