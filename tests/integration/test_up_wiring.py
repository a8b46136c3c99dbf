"""`egbe up` wires the kernel's dispatcher to the gateway and biography it serves, so a world run against
it has its cognition calls made; a kernel with no gateway says so at start and in `egbe health`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from assembly.embedded import DemoTarget
from assembly.settings import load_settings
from assembly.world_runs import run_demo
from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from kernel_service.server import UNWIRED_NOTES
from services.auth import bearer_metadata
from tests.conftest import ROOT, EmbeddedEgbe, start_embedded, stop_embedded


@pytest.fixture(scope="module", params=["tcp", "unix-socket-dir"])
def up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    root = tmp_path_factory.mktemp(f"up-{request.param}")
    extra = ("--unix-socket-dir", str(root / "sock")) if request.param == "unix-socket-dir" else ()
    egbe = start_embedded(root / "data", *extra)
    yield egbe
    assert stop_embedded(egbe) == 0


def _audit_records(egbe: EmbeddedEgbe) -> list[gateway_pb2.AuditRecord]:
    records: list[gateway_pb2.AuditRecord] = []
    token = ""
    with grpc.insecure_channel(egbe.targets["gateway"]) as channel:
        stub = gateway_pb2_grpc.OperatorServiceStub(channel)
        for _ in range(1000):  # bounded paging
            page = stub.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(page_size=500, page_token=token),
                metadata=bearer_metadata(egbe.tokens["operator"]),
                timeout=10,
            )
            records.extend(page.records)
            token = page.next_page_token
            if not token:
                return records
    raise AssertionError("the audit log did not end within 1000 pages")


def _egbe(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_world_against_egbe_up_has_its_calls_run_by_the_gateway(
    up: EmbeddedEgbe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    settings = load_settings(data_dir=up.data_dir)
    _, artifact = await run_demo(
        settings,
        "hamlet",
        7,
        tmp_path / "runs",
        reduced_time=True,
        progress=False,
        target=DemoTarget.RUNNING,
    )
    assert artifact.ticks_run == 1200
    assert artifact.bill.calls_issued > 0
    assert artifact.bill.model_calls_run > 0
    records = _audit_records(up)
    assert len(records) >= artifact.bill.model_calls_run
    assert {call.run_id for call in artifact.calls} <= {record.run_id for record in records}


async def test_egbe_health_shows_a_wired_kernel_without_a_note(up: EmbeddedEgbe) -> None:
    async with grpc.aio.insecure_channel(up.targets["kernel"]) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for part in UNWIRED_NOTES:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=part), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, part
    result = _egbe(up.data_dir, "health", "--service", "kernel")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{'kernel':<10} {'SERVING':<24} {up.targets['kernel']}"]


def _log_lines(egbe: EmbeddedEgbe) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (egbe.data_dir / "egbe-up.log").read_text().splitlines()]


def test_the_kernel_logs_where_its_dispatcher_dials(up: EmbeddedEgbe) -> None:
    (serving,) = [
        line for line in _log_lines(up) if line["event"] == "service serving" and line["service"] == "kernel"
    ]
    assert (serving["gateway_target"], serving["biography_target"], serving["policy_target"]) == (
        up.targets["gateway"],
        up.targets["biography"],
        up.targets["policy"],
    )
    assert not [line for line in _log_lines(up) if line["level"] == "warning"]


NO_GATEWAY = "no gateway: cognition calls are reported, never made; set kernel.gateway_target"
NO_BIOGRAPHY = "no biography: lifecycle requests are reported, never carried; set kernel.biography_target"
NO_POLICY = "no policy: steward directives are answered FAILED_PRECONDITION; set kernel.policy_target"


def test_a_kernel_served_without_targets_says_so_at_start_and_in_health(tmp_path: Path) -> None:
    kernel = start_embedded(tmp_path, command=("serve", "kernel"))
    try:
        result = _egbe(tmp_path, "health", "--service", "kernel")
    finally:
        assert stop_embedded(kernel) == 0
    assert result.returncode == 0, result.stdout + result.stderr  # the kernel serves ticks
    assert result.stdout.splitlines() == [
        f"{'kernel':<10} SERVING ({NO_GATEWAY}) ({NO_BIOGRAPHY}) ({NO_POLICY}) {kernel.targets['kernel']}"
    ]
    warnings = [(line["event"], line["health"]) for line in _log_lines(kernel) if line["level"] == "warning"]
    assert warnings == [
        (f"kernel serves, but {NO_GATEWAY}", "egbe.v1.KernelService/dispatch"),
        (f"kernel serves, but {NO_BIOGRAPHY}", "egbe.v1.KernelService/lifecycle"),
        (f"kernel serves, but {NO_POLICY}", "egbe.v1.KernelService/steward"),
    ]


def test_up_keeps_a_target_the_operator_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_KERNEL__GATEWAY_TARGET", "gateway.example:50052")
    egbe = start_embedded(tmp_path)
    try:
        result = _egbe(tmp_path, "health", "--service", "kernel")
    finally:
        assert stop_embedded(egbe) == 0
    (serving,) = [
        line
        for line in _log_lines(egbe)
        if line["event"] == "service serving" and line["service"] == "kernel"
    ]
    assert (serving["gateway_target"], serving["biography_target"], serving["policy_target"]) == (
        "gateway.example:50052",
        egbe.targets["biography"],
        egbe.targets["policy"],
    )
    assert result.stdout.splitlines() == [f"{'kernel':<10} {'SERVING':<24} {egbe.targets['kernel']}"]
