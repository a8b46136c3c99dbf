"""`egbe ops` and `egbe audit export` against a running `egbe up`, as an operator would use them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from tests.conftest import ROOT, EmbeddedEgbe


def egbe(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), *args],
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
    assert spend["admissions"] == 1  # numbers as numbers, money in dollars
    assert spend["consumed_tokens"] > 0
    assert isinstance(spend["consumed_usd"], float)
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


def test_listings_piped_into_a_reader_that_has_gone_end_quietly(embedded_egbe: EmbeddedEgbe) -> None:
    """`egbe audit export | head -1` and `egbe ops attempts | head -1`, with the reader already gone."""
    service = bearer_metadata(embedded_egbe.tokens["service"])
    with grpc.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        ori = common_pb2.OriRef(tenant_id="t", world_id="pipe-world", ori_id="pipe-ori")
        run = gateway_pb2_grpc.CognitionGatewayServiceStub(channel).AdmitRun(
            gateway_pb2.AdmitRunRequest(ori=ori, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=2),
            metadata=service,
        )
        gateway_pb2_grpc.CognitionGatewayServiceStub(channel).Generate(
            gateway_pb2.GenerateRequest(run_id=run.run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE),
            metadata=service,
        )
    console_script = ROOT / ".venv" / "bin" / "egbe"
    for command in (("audit", "export", "--ori", "pipe-ori"), ("ops", "attempts")):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run(
                [str(console_script), "--data-dir", str(embedded_egbe.data_dir), *command],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            os.close(write_end)
        assert (command, done.returncode, done.stderr) == (command, 1, "")


def test_world_scoped_expiring_kills_worlds_caps_and_a_watched_spend(embedded_egbe: EmbeddedEgbe) -> None:
    """`egbe ops kill ori ... --world W --for 10m`, its repeat, a resume of nothing, `egbe ops worlds`,
    `egbe ops cap set` and `egbe ops spend --watch`, as an operator types them."""
    data_dir = embedded_egbe.data_dir
    service = bearer_metadata(embedded_egbe.tokens["service"])
    with grpc.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        ori = common_pb2.OriRef(tenant_id="t", world_id="cli-hamlet-7", ori_id="cli-adaeze")
        run = stub.AdmitRun(
            gateway_pb2.AdmitRunRequest(ori=ori, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=1),
            metadata=service,
        )
        stub.Generate(
            gateway_pb2.GenerateRequest(run_id=run.run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE),
            metadata=service,
        )
    kill = ("ops", "kill", "ori", "cli-adaeze", "--world", "cli-hamlet-7", "--for", "10m", "--reason", "loop")
    try:
        first = egbe(data_dir, *kill)
        assert first.returncode == 0, first.stderr
        killed = json.loads(first.stdout)
        assert (killed["control"]["world_id"], killed["existing"], killed["warning"]) == (
            "cli-hamlet-7",
            False,
            "",
        )
        assert killed["runs_aborted"] == 1
        assert killed["control"]["expires_at"] > killed["control"]["created_at"]
        again = json.loads(egbe(data_dir, *kill).stdout)
        assert (again["control"]["control_id"], again["existing"]) == (killed["control"]["control_id"], True)
        unseen = json.loads(egbe(data_dir, "ops", "kill", "ori", "cli-nobody", "--reason", "typo?").stdout)
        assert unseen["warning"].startswith("no run of Ori 'cli-nobody' has been seen")

        worlds = [json.loads(line) for line in egbe(data_dir, "ops", "worlds").stdout.splitlines()]
        [world] = [w for w in worlds if w["world_id"] == "cli-hamlet-7"]
        assert (world["calls"], world["admissions"]) == (1, 1)
        assert isinstance(world["consumed_usd"], float)
        assert world["consumed_tokens"] > 0
        assert [c["target"] for c in world["active_controls"]] == ["cli-adaeze"]

        cap_set = ("ops", "cap", "set", "--world", "cli-hamlet-7", "--reason", "drill", "--tokens-per-hour")
        capped = egbe(data_dir, *cap_set, "9000")
        assert capped.returncode == 0, capped.stderr
        assert json.loads(capped.stdout)["world_cap_tokens"] == 9_000
        refused = egbe(data_dir, *cap_set, "0")
        assert (refused.returncode, "tokens_per_hour" in refused.stderr) == (1, True), refused.stderr

        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "assembly.cli",
                "--data-dir",
                str(data_dir),
                "ops",
                "spend",
                "--world",
                "cli-hamlet-7",
                "--watch",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        lines = [json.loads(watch.stdout.readline()) for _ in range(2)]  # a second apart
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
        assert [line["world_cap_tokens"] for line in lines] == [9_000, 9_000]
    finally:
        for target in ("cli-adaeze", "cli-nobody"):
            egbe(data_dir, "ops", "resume", "ori", target, "--reason", "drill over")
    nothing = egbe(data_dir, "ops", "resume", "ori", "cli-nobody", "--reason", "again")
    assert nothing.returncode == 1
    assert "NOT_FOUND" in nothing.stderr
    assert "'cli-nobody'" in nothing.stderr
