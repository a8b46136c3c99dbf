"""A demo says what happened: a model path that failed entirely ends non-zero and names the failures, and
a control left over from before the run is listed with the calls it stopped."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assembly.embedded import DemoTarget, services_for_run
from assembly.settings import load_settings
from egbe.v1 import gateway_pb2
from services.settings import SERVICE_NAMES
from tests.conftest import ROOT
from tests.gateway.harness import record_route_scores
from tests.integration.test_world_demo import isolated_settings
from world.clients import ServiceClients
from world.demo import summary
from world.report import render_report
from world.run import RunOptions, execute
from world.run_folder import ARTIFACT_FILE
from world.scenario import load_scenario

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_demo_whose_model_calls_all_fail_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    env = {
        "EGBE_LOG_LEVEL": "error",
        "PATH": "/usr/bin:/bin",
        "ANTHROPIC_API_KEY": "sk-dummy",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{_closed_port()}",
        **{f"EGBE_ENDPOINTS__{name.upper()}__PORT": "0" for name in SERVICE_NAMES},
    }
    # The demo's model routes have their scores: what fails is every call, not the eval gate.
    asyncio.run(record_route_scores(load_settings(data_dir=tmp_path / "data")))
    command = [sys.executable, "-m", "assembly.cli", "--data-dir", str(tmp_path / "data"), "demo"]
    result = subprocess.run(
        [*command, "--reduced-time", "--quiet", "--target", "embedded", "--runs-dir", str(tmp_path / "runs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    artifact = json.loads((run_dir / ARTIFACT_FILE).read_text())
    outcomes, bill = artifact["outcomes"], artifact["bill"]
    assert artifact["answered_by"] == "failed"
    assert bill["model_calls_run"] > 0
    assert outcomes["failed_by_class"] == {"network": bill["model_calls_run"]}
    assert outcomes["answered_by_model"] == outcomes["answered_offline"] == 0
    assert {c["outcome"] for c in artifact["calls"]} == {"failed"}
    lines = result.stdout.splitlines()
    n = bill["model_calls_run"]
    assert lines[0] == f"FAILED: none of the {n:,} model calls run was answered; {n:,} failed (network {n:,})"
    assert (
        f"FAILED     no call was answered: all {n:,} model calls run failed (network {n:,})" in result.stdout
    )
    assert "MODEL" not in result.stdout
    banner = (run_dir / "report.html").read_text().split("<body>", 1)[1].split("</p>", 1)[0]
    assert banner.startswith('<p class="banner failed">FAILED: none of the')
    assert "MODEL" not in banner


async def test_a_control_left_over_from_before_the_run_is_listed(tmp_path: Path) -> None:
    scenario = load_scenario("hamlet")
    run_dir = tmp_path / "runs" / "leftover"
    run_dir.mkdir(parents=True)
    settings = isolated_settings(tmp_path / "data")
    async with services_for_run(settings, run_dir, scenario.snapshot_every_ticks, DemoTarget.EMBEDDED) as svc:
        clients = ServiceClients.dial(svc.targets, svc.tokens, svc.settings)
        try:
            thrown = await clients.operator.KillOri(
                gateway_pb2.KillOriRequest(ori_id="adaeze", reason="an earlier run's kill"),
                metadata=clients.operator_md,
            )
        finally:
            await clients.close()
        options = RunOptions(scenario, 7, reduced_time=True, progress=False)
        artifact = await execute(svc, options=options, run_dir=run_dir, run_id="leftover")
    left = [c for c in artifact.controls if c.left_over]
    assert [(c.control_id, c.scope, c.target, c.world_id, c.reason) for c in left] == [
        (thrown.control.control_id, "ori", "adaeze", "", "an earlier run's kill")
    ]
    assert left[0].calls_stopped > 0
    assert left[0].expires_at is None
    assert all(c.ori_id != "adaeze" or c.outcome == "stopped" for c in artifact.calls)
    text = summary(run_dir, artifact)
    assert f"control    kill ori adaeze in every world ({thrown.control.control_id}; left over" in text
    assert "an earlier run&#x27;s kill" in render_report(artifact)
