"""The hamlet through five OS processes on PostgreSQL, and faults: SIGKILL cognition mid-run (the
tick path carries on, cognition resumes), SIGKILL the gateway (kill switches and the ledger survive
exactly), SIGKILL the biography during appends (every acknowledged event survives, chains verify)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from egbe.v1 import biography_pb2, biography_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from gateway.records import LEASE_SETTLED
from kernel_service.server import UNWIRED_NOTES
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses
from tests.conftest import ROOT, dialogue_submit
from tests.system.cluster import running_cluster

pytestmark = pytest.mark.postgres


@pytest.fixture
def services(postgres_dsn: str, tmp_path: Path) -> Iterator[ServiceProcesses]:
    with running_cluster(tmp_path / "services", postgres_dsn) as processes:
        yield processes


def _demo(services: ServiceProcesses, runs: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "assembly.cli", "--data-dir", str(runs / "cli")),
            *("demo", "--target", "running", "--quiet", "--runs-dir", str(runs), *extra),
        ],
        cwd=ROOT,
        env=services.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(demo: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = demo.communicate(timeout=240)
    assert demo.returncode == 0, stdout + stderr
    assert "using the running Egbe services" in stderr
    (artifact_line,) = [line for line in stdout.splitlines() if line.startswith("artifact")]
    artifact: dict[str, Any] = json.loads(Path(artifact_line.split()[-1]).read_text())
    return artifact


def _spend(services: ServiceProcesses) -> gateway_pb2.GetSpendResponse:
    with grpc.insecure_channel(services.target("gateway")) as channel:
        reply: gateway_pb2.GetSpendResponse = gateway_pb2_grpc.OperatorServiceStub(channel).GetSpend(
            gateway_pb2.GetSpendRequest(), metadata=bearer_metadata(services.tokens["operator"]), timeout=10
        )
    return reply


def _quiescent_spend(services: ServiceProcesses, timeout: float = 90.0) -> gateway_pb2.GetSpendResponse:
    """The ledger once nothing is in flight: the kernel's dispatcher drains its queue after a run ends."""
    deadline = time.monotonic() + timeout
    previous = _spend(services)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        current = _spend(services)
        if current == previous and current.reserved_tokens == 0:
            return current
        previous = current
    raise TimeoutError(f"the gateway ledger did not settle within {timeout} s: {previous}")


def _audit_records(services: ServiceProcesses) -> list[gateway_pb2.AuditRecord]:
    records: list[gateway_pb2.AuditRecord] = []
    token = ""
    with grpc.insecure_channel(services.target("gateway")) as channel:
        stub = gateway_pb2_grpc.OperatorServiceStub(channel)
        for _ in range(1000):  # bounded paging
            page = stub.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(page_size=200, page_token=token),
                metadata=bearer_metadata(services.tokens["operator"]),
                timeout=10,
            )
            records.extend(page.records)
            token = page.next_page_token
            if not token:
                break
    return records


def test_hamlet_through_five_processes_on_postgres(services: ServiceProcesses, tmp_path: Path) -> None:
    # The kernel process is wired to the gateway and biography processes, and its health says so.
    with grpc.insecure_channel(services.target("kernel")) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for part in UNWIRED_NOTES:
            reply = health.Check(health_pb2.HealthCheckRequest(service=part), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, part
    artifact = _finish(_demo(services, tmp_path, "--reduced-time"))
    assert artifact["ticks_run"] == 1200

    spend = _quiescent_spend(services)
    records = _audit_records(services)
    billed_calls = sum(tier["calls"] for tier in artifact["bill"]["by_tier"])
    assert billed_calls > 0
    # The ledger and the audit log agree exactly; the run's bill, taken as the run ended, is part of
    # it (calls the dispatcher still had queued complete afterwards).
    assert len(records) == sum(t.calls for t in spend.by_tier)
    assert sum(r.usage.input_tokens + r.usage.output_tokens for r in records) == spend.consumed_tokens
    assert artifact["bill"]["consumed_tokens"] <= spend.consumed_tokens
    assert billed_calls <= len(records)

    # Every biography the run wrote verifies, with at least the events the run reported.
    with grpc.insecure_channel(services.target("biography")) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)
        for biography in artifact["biographies"]:
            check = stub.VerifyChain(
                biography_pb2.VerifyChainRequest(ori_id=biography["ori_id"]),
                metadata=bearer_metadata(services.tokens["service"]),
                timeout=10,
            )
            assert check.intact, biography["ori_id"]
            assert check.events_checked >= biography["events"]


def test_sigkill_cognition_mid_run_keeps_every_tick_answered_and_cognition_resumes(
    services: ServiceProcesses, tmp_path: Path
) -> None:
    admissions_before = _spend(services).admissions  # the services are shared with earlier tests
    demo = _demo(services, tmp_path)  # the full hamlet: 3,600 ticks
    deadline = time.monotonic() + 60
    while _spend(services).admissions == admissions_before and time.monotonic() < deadline:
        time.sleep(0.1)  # wait until this run is under way (its first admission), not an earlier one
    services.kill("cognition")
    assert not services.serving("cognition")
    time.sleep(1.0)  # the world keeps ticking with cognition dead
    services.start("cognition")
    consumed_at_restart = _spend(services).consumed_tokens
    artifact = _finish(demo)

    # The kernel answered every tick although cognition died mid-run (behaviour-tree actions).
    assert artifact["ticks_run"] == 3600
    # After the restart, cognition calls complete again: the ledger moves on. The run itself may end
    # (3,600 ticks take a few seconds) before it asks the restarted service for anything, so one more
    # call goes through the gateway's Submit, which calls the restarted service's Think.
    with grpc.insecure_channel(services.target("gateway")) as channel:
        reply = gateway_pb2_grpc.CognitionGatewayServiceStub(channel).Submit(
            dialogue_submit("after-restart", "ada", "after-restart"),
            metadata=bearer_metadata(services.tokens["service"]),
            timeout=30,
        )
    # A fresh Ori and a fixed stimulus: the offline reply validates and the gate approves it, so the
    # restarted cognition commits it.
    assert reply.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED, reply.detail
    assert reply.policy_decision == "approved"
    assert len(reply.committed_event_ids) == 1
    assert _spend(services).consumed_tokens > consumed_at_restart


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _controls(services: ServiceProcesses) -> list[gateway_pb2.Control]:
    with grpc.insecure_channel(services.target("gateway")) as channel:
        reply = gateway_pb2_grpc.OperatorServiceStub(channel).ListControls(
            gateway_pb2.ListControlsRequest(include_inactive=True, page_size=100),
            metadata=bearer_metadata(services.tokens["operator"]),
            timeout=10,
        )
    return list(reply.controls)


def test_sigkill_gateway_keeps_kill_switches_and_settles_its_lease_exactly(
    services: ServiceProcesses, tmp_path: Path
) -> None:
    _finish(_demo(services, tmp_path, "--reduced-time"))
    with grpc.insecure_channel(services.target("gateway")) as channel:
        gateway_pb2_grpc.OperatorServiceStub(channel).KillOri(
            gateway_pb2.KillOriRequest(ori_id="adaeze", reason="fault test"),
            metadata=bearer_metadata(services.tokens["operator"]),
            timeout=10,
        )
    spend = _quiescent_spend(services)
    controls = _controls(services)
    assert any(c.target == "adaeze" and c.active for c in controls)
    assert spend.consumed_tokens > 0

    services.kill("gateway")
    services.start("gateway")

    assert _controls(services) == controls
    # What the killed gateway's lease held is settled as spent (nothing proves it unspent), with its
    # audit record: the ledger is otherwise unchanged and still equals the audit log exactly.
    after = _spend(services)
    records = _audit_records(services)
    settled = sum(r.usage.input_tokens for r in records if r.error_class == LEASE_SETTLED)
    assert after.consumed_tokens == spend.consumed_tokens + settled
    assert after.consumed_tokens == sum(r.usage.input_tokens + r.usage.output_tokens for r in records)
    assert (after.reserved_tokens, after.admissions, after.killed) == (0, spend.admissions, spend.killed)


def test_sigkill_biography_during_appends_loses_no_acknowledged_event(services: ServiceProcesses) -> None:
    ori_id = f"fault-{uuid.uuid4().hex[:8]}"
    acknowledged: list[str] = []
    refusals: list[grpc.RpcError] = []
    stop = threading.Event()

    def append_until_refused() -> None:
        with grpc.insecure_channel(services.target("biography")) as channel:
            stub = biography_pb2_grpc.BiographyServiceStub(channel)
            for tick in range(1, 100_000):  # bounded; stops at the first refusal
                if stop.is_set():
                    return
                event_id = str(uuid.uuid4())
                request = biography_pb2.AppendRequest(
                    ori_id=ori_id,
                    expected_version=biography_pb2.ExpectedVersion(
                        kind=biography_pb2.ExpectedVersion.KIND_ANY
                    ),
                    events=[
                        biography_pb2.NewOriEvent(
                            event_id=event_id,
                            kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
                            payload=_struct({"text": f"memory {tick}"}),
                            world_tick=tick,
                            provenance_ref="fault-test",
                        )
                    ],
                )
                try:
                    stub.Append(request, metadata=bearer_metadata(services.tokens["service"]), timeout=5)
                except grpc.RpcError as error:
                    refusals.append(error)
                    return
                acknowledged.append(event_id)

    writer = threading.Thread(target=append_until_refused)
    writer.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 20 and not refusals and time.monotonic() < deadline:
        time.sleep(0.05)
    services.kill("biography")
    writer.join(timeout=30)
    stop.set()
    assert len(acknowledged) >= 20, refusals
    assert all(error.code() == grpc.StatusCode.UNAVAILABLE for error in refusals), refusals  # type: ignore[attr-defined]

    services.start("biography")
    recorded: list[str] = []
    with grpc.insecure_channel(services.target("biography")) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)
        metadata = bearer_metadata(services.tokens["service"])
        token = ""
        for _ in range(10_000):  # bounded paging
            page = stub.Read(
                biography_pb2.ReadRequest(ori_id=ori_id, page_size=500, page_token=token),
                metadata=metadata,
                timeout=10,
            )
            recorded.extend(event.event_id for event in page.events)
            token = page.next_page_token
            if not token:
                break
        check = stub.VerifyChain(
            biography_pb2.VerifyChainRequest(ori_id=ori_id), metadata=metadata, timeout=10
        )
    assert set(acknowledged) <= set(recorded)
    assert check.intact
    assert check.events_checked == len(recorded)
