"""Every service of `egbe up` serves Prometheus metrics by default: after a demo run against it, each
endpoint (published in endpoints.json) has the chassis's RPC families and the service's own, and
their counts agree with what the run did."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, start_embedded, stop_embedded
from tests.prometheus_samples import Samples, exposed_samples

pytestmark = pytest.mark.slow

FAMILIES = {
    "kernel": ["egbe_kernel_ticks_total", "egbe_kernel_tick_seconds_count", "egbe_kernel_calls_issued_total"],
    "gateway": [
        "egbe_gateway_admissions_total",
        "egbe_gateway_model_calls_total",
        "egbe_gateway_store_conflicts_total",
    ],
    "cognition": ["egbe_cognition_stage_seconds_count", "egbe_cognition_thinks_total"],
    "policy": ["egbe_policy_decisions_total"],
    "biography": ["egbe_biography_events_appended_total", "egbe_biography_append_seconds_count"],
}


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 (an http:// URL egbe up published)
        return exposed_samples(reply.read())


def _total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        value
        for (sample, keys), value in samples.items()
        if sample == name and set(labels.items()) <= set(keys)
    )


def test_each_service_of_egbe_up_is_scraped_after_a_demo(tmp_path: Path) -> None:
    egbe = start_embedded(tmp_path / "up")
    try:
        assert sorted(egbe.metrics) == sorted(FAMILIES)
        demo = subprocess.run(
            [
                sys.executable,
                "-m",
                "assembly.cli",
                "--data-dir",
                str(egbe.data_dir),
                "demo",
                "--target",
                "running",
                "--reduced-time",
                "--quiet",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert demo.returncode == 0, demo.stderr[-2000:]
        scraped = {service: _scrape(url) for service, url in egbe.metrics.items()}
    finally:
        stop_embedded(egbe)
    for service, names in FAMILIES.items():
        present = {name for name, _ in scraped[service]}
        assert set(names) <= present, (service, set(names) - present)
        assert _total(scraped[service], "egbe_rpc_handled_total", service=service) > 0, service
    kernel, gateway, cognition = scraped["kernel"], scraped["gateway"], scraped["cognition"]
    # The reduced-time hamlet run is 1,200 ticks over the stream, each answered once.
    assert kernel[("egbe_kernel_ticks_total", ())] == 1_200
    assert (
        _total(kernel, "egbe_rpc_handled_total", method="/egbe.v1.KernelService/StreamTicks", code="OK") == 1
    )
    # Every Think the gateway's Submits asked for was answered and counted by cognition.
    thinks = _total(cognition, "egbe_cognition_thinks_total")
    assert thinks == _total(cognition, "egbe_rpc_handled_total", method="/egbe.v1.CognitionService/Think")
    assert thinks == _total(
        gateway, "egbe_rpc_handled_total", method="/egbe.v1.CognitionGatewayService/Submit", code="OK"
    )
    assert _total(cognition, "egbe_cognition_stage_seconds_count", stage="commit") == thinks
