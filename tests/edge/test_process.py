"""`egbe edge` as its own process, in front of services another process serves (as deploy/ runs it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from services.local_cluster import free_ports
from tests.conftest import ROOT
from tests.edge.conftest import WORLD, EdgeEgbe


@pytest.fixture
def edge_process(registered: EdgeEgbe) -> Iterator[str]:
    """`egbe edge` on a port of its own, finding the services in the data dir `egbe up` published."""
    [port] = free_ports(1)
    log = (registered.egbe.data_dir / "edge.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(registered.egbe.data_dir), "edge"],
        cwd=ROOT,
        env={**os.environ, "EGBE_EDGE__PORT": str(port), "EGBE_LOG_FORMAT": "json"},
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, (registered.egbe.data_dir / "edge.log").read_text()[-3000:]
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    yield base
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def test_the_edge_process_forwards_to_the_published_services(edge_process: str, registered: EdgeEgbe) -> None:
    answer = httpx.post(
        f"{edge_process}/v1/KernelService/GetAgentState",
        json={"worldId": WORLD, "oriId": "ori-0"},
        headers=registered.bearer("world"),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["ori"] == {"tenantId": "edge", "worldId": WORLD, "oriId": "ori-0"}
