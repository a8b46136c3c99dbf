"""`egbe ops` and `egbe audit export` against a running `egbe up`, as an operator would use them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from tests.conftest import ROOT, EmbeddedEgbe


def egbe(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_operators_kill_list_spend_resume_and_export(
    embedded_egbe: EmbeddedEgbe, tmp_path: Path
) -> None:
    service = bearer_metadata(embedded_egbe.tokens["service"])
    async with grpc.aio.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        ori = common_pb2.OriRef(tenant_id="t", world_id="cli-world", ori_id="cli-ada")
        run = await stub.AdmitRun(
            gateway_pb2.AdmitRunRequest(ori=ori, tier=common_pb2.COGNITION_TIER_LACHESIS, cause=2),
            metadata=service,
        )
        await stub.Generate(
            gateway_pb2.GenerateRequest(run_id=run.run_id, mode=gateway_pb2.COGNITION_MODE_REFLECTION),
            metadata=service,
        )
    data_dir = embedded_egbe.data_dir

    killed = egbe(data_dir, "ops", "kill", "ori", "cli-ada", "--reason", "runaway")
    assert killed.returncode == 0, killed.stderr
    assert json.loads(killed.stdout)["runs_aborted"] == 1
    listed = egbe(data_dir, "ops", "list")
    assert [json.loads(line)["target"] for line in listed.stdout.splitlines()] == ["cli-ada"]
    spend = json.loads(egbe(data_dir, "ops", "spend", "--world", "cli-world").stdout)
    assert spend["admissions"] == "1"
    assert int(spend["consumed_tokens"]) > 0
    attempts = egbe(data_dir, "ops", "attempts", "--decision", "allowed", "--method", "KILL:ORI")
    assert attempts.returncode == 0, attempts.stderr
    [kill_attempt] = [json.loads(line) for line in attempts.stdout.splitlines()]
    assert (kill_attempt["detail"], kill_attempt["allowed"]) == ("cli-ada: runaway", True)
    assert egbe(data_dir, "ops", "attempts", "--decision", "refused").stdout == ""
    resumed = egbe(data_dir, "ops", "resume", "ori", "cli-ada", "--reason", "reviewed")
    assert len(json.loads(resumed.stdout)["lifted"]) == 1
    assert egbe(data_dir, "ops", "list").stdout == ""

    exported = tmp_path / "audit.jsonl"
    assert egbe(data_dir, "audit", "export", "--ori", "cli-ada", "--output", str(exported)).returncode == 0
    [record] = [json.loads(line) for line in exported.read_text().splitlines()]
    assert record["run_id"] == run.run_id
    assert record["offline"] is True
    assert record["cause"] == "lachesis-reflection"

    refused = egbe(data_dir, "ops", "kill", "tier", "nonsense", "--reason", "x")
    assert refused.returncode == 1
    assert "INVALID_ARGUMENT" in refused.stderr


def test_operators_kill_a_tier_and_a_tenant_pause_and_quarantine_then_resume_each(
    embedded_egbe: EmbeddedEgbe,
) -> None:
    data_dir = embedded_egbe.data_dir
    controls = (
        ("kill", "tier", "atropos", "KILL", "TIER"),
        ("kill", "tenant", "cli-tenant-k", "KILL", "TENANT"),
        ("pause", "ori", "cli-paused", "PAUSE", "ORI"),
        ("quarantine", "tenant", "cli-tenant-q", "QUARANTINE", "TENANT"),
    )
    try:
        for command, scope, target, _, _ in controls:
            done = egbe(data_dir, "ops", command, scope, target, "--reason", f"{command} drill")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["control"]["target"] == target
        listed = [json.loads(line) for line in egbe(data_dir, "ops", "list").stdout.splitlines()]
        assert sorted((c["kind"], c["scope"], c["target"]) for c in listed) == sorted(
            (f"CONTROL_KIND_{kind}", f"CONTROL_SCOPE_{scope}", target) for *_, target, kind, scope in controls
        )
        assert all(c["reason"].endswith(" drill") for c in listed)
    finally:  # (the embedded services are shared by the session's other tests)
        for _, scope, target, _, _ in controls:
            egbe(data_dir, "ops", "resume", scope, target, "--reason", "drill over")
    assert egbe(data_dir, "ops", "list").stdout == ""
