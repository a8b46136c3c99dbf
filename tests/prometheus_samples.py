"""Reading a Prometheus exposition back in tests: every sample by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def exposed_samples(exposition: bytes) -> Samples:
    """Each sample's value, keyed by its name and its labels (sorted)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition.decode())
        for sample in family.samples
    }


def scrape(port: int) -> bytes:
    """A service's Prometheus endpoint on loopback, over HTTP (blocking: call it in a thread)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        body: bytes = reply.read()
    return body
