"""Every `sh` command in README.md, run as written, so the README cannot promise what the code does not do.

Each command runs in a scratch folder that holds the repository's Makefile and virtualenv (linked), so
`runs/`, `low-cap.toml` and the default data dir `.egbe` land there. Only the environment is
isolated: every service port is 0, so nothing another process serves on the default ports is used,
and no model key is set. A command is changed only where the README writes a placeholder
(`<run-id>`) or a machine folder (`/run/egbe`); commands that are not run say why in NOT_RUN.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from assembly.settings import EgbeSettings, load_settings
from services.settings import SERVICE_NAMES, Endpoint
from tests.conftest import ROOT
from world.artifact import read_artifact
from world.run_folder import ARTIFACT_FILE, REPORT_FILE, TICK_LOG_FILE

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
NOT_RUN = {
    "make test": "runs the whole suite, this test included; CI runs it (.ci/run)",
}
# The start of each README command not run here (why), and of each one a test below runs (which).
RUN_BY = {
    "make demo": "hamlet_run",
    ".venv/bin/egbe replay ": "test_replay_and_fork_of_the_demo_run",
    "printf ": "test_replay_and_fork_of_the_demo_run",
    ".venv/bin/egbe fork ": "test_replay_and_fork_of_the_demo_run",
    ".venv/bin/egbe demo --scenario solo-ceiling": "test_solo_ceiling_reduced_time_and_what_it_forks_at",
    ".venv/bin/egbe up  ": "test_egbe_up_serves_every_service_wired",
    ".venv/bin/egbe up --unix-socket-dir /run/egbe": "test_egbe_up_on_unix_sockets",
    ".venv/bin/egbe serve kernel": "test_egbe_serve_kernel_alone_is_noted_unwired",
    ".venv/bin/egbe health": "every test that serves",
    ".venv/bin/egbe budget worst-case --json": "test_budget_worst_case_and_version",
    ".venv/bin/egbe version": "test_budget_worst_case_and_version",
}
# What `make demo` reads from the repository besides the virtualenv (its install prerequisites).
MAKE_INPUTS = ("Makefile", "pyproject.toml", "setup.py", "kernel_service")
SERVE_SECONDS = 30.0


def readme_commands() -> list[str]:
    """Every line of every ```sh block of README.md, as written."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def command(prefix: str) -> str:
    """The one README command that starts with `prefix`, exactly as written."""
    assert prefix in RUN_BY
    (found,) = [c for c in readme_commands() if c.startswith(prefix)]
    return found


@dataclass
class Shell:
    """Runs README lines with bash in the scratch folder, under the isolated environment."""

    cwd: Path
    env: dict[str, str]

    def run(self, line: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", line],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, line: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def runs(self) -> set[str]:
        folder = self.cwd / "runs"
        return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Shell:
    cwd = tmp_path_factory.mktemp("readme")
    for name in (".venv", *MAKE_INPUTS):
        (cwd / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EGBE_", "ANTHROPIC_"))}
    env.update({f"EGBE_ENDPOINTS__{name.upper()}__PORT": "0" for name in SERVICE_NAMES})
    env.update({"EGBE_EDGE__PORT": "0", "EGBE_CONSOLE__PORT": "0"})  # the HTTP listeners too
    return Shell(cwd, env)


@pytest.fixture(scope="module")
def hamlet_run(shell: Shell) -> str:
    """`make demo`, as the README's first command; the id of the run it wrote."""
    stale = subprocess.run(["make", "-q", "install"], cwd=shell.cwd, env=shell.env, check=False)
    assert stale.returncode == 0, "the virtualenv is older than its inputs: `make install` first"
    result = shell.run(command("make demo"), timeout=300)
    assert result.returncode == 0, result.stderr
    (run_id,) = shell.runs()
    assert f"artifact   runs/{run_id}/{ARTIFACT_FILE}" in result.stdout
    return run_id


def test_every_readme_command_is_run_or_excused() -> None:
    """Each README command is excused, or starts with exactly one of the prefixes the tests run."""
    commands = readme_commands()
    assert len(commands) == len(set(commands))
    for line in commands:
        handled = [p for p in (*RUN_BY, *NOT_RUN) if line.startswith(p)]
        assert len(handled) == 1, f"README command neither run by a test nor excused: {line}"
    for prefix in (*RUN_BY, *NOT_RUN):
        assert len([c for c in commands if c.startswith(prefix)]) == 1, prefix


def test_make_demo_writes_the_run_folder_the_readme_describes(shell: Shell, hamlet_run: str) -> None:
    run_dir = shell.cwd / "runs" / hamlet_run
    for name in (ARTIFACT_FILE, REPORT_FILE, TICK_LOG_FILE):
        assert (run_dir / name).is_file(), name
    artifact = read_artifact(run_dir / ARTIFACT_FILE)
    assert (artifact.scenario.name, artifact.population["total"], artifact.ticks_run) == ("hamlet", 12, 3_600)
    assert (
        (run_dir / REPORT_FILE)
        .read_text()
        .split("<body>", 1)[1]
        .startswith('<p class="banner offline">OFFLINE')
    )


def test_replay_and_fork_of_the_demo_run(shell: Shell, hamlet_run: str) -> None:
    replay = shell.run(command(".venv/bin/egbe replay ").replace("<run-id>", hamlet_run))
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout == "matches (3,600 ticks)\n"
    config = shell.run(command("printf "))
    assert config.returncode == 0, config.stderr
    assert (
        load_settings(config_file=shell.cwd / "low-cap.toml").gateway.budget.world_cap_tokens_per_hour
        == 60_000
    )
    before = shell.runs()
    fork = shell.run(command(".venv/bin/egbe fork ").replace("<run-id>", hamlet_run), timeout=180)
    assert fork.returncode == 0, fork.stderr
    assert fork.stdout.startswith("bills for ticks 1800..3599\n")
    (fork_id,) = shell.runs() - before
    assert fork_id.endswith(f"-fork-of-{hamlet_run}-at-1800")
    artifact = read_artifact(shell.cwd / "runs" / fork_id / ARTIFACT_FILE)
    assert artifact.forked_from == {"run_id": hamlet_run, "at_tick": 1_800, "config": "low-cap.toml"}
    assert (artifact.tiers.ticks[0], artifact.tiers.ticks[-1]) == (1_800, 3_599)
    assert artifact.bill.world_cap_tokens == 60_000


def test_solo_ceiling_reduced_time_and_what_it_forks_at(shell: Shell, hamlet_run: str) -> None:
    """The reduced-time run is shorter than its snapshot cadence: it forks at tick 0 alone, and says so."""
    before = shell.runs()
    solo = shell.run(command(".venv/bin/egbe demo --scenario solo-ceiling"), timeout=240)
    assert solo.returncode == 0, solo.stderr
    (run_id,) = shell.runs() - before
    assert f"run        {run_id} (600 ticks, 1,424 Ori," in solo.stdout
    assert [s.tick for s in read_artifact(shell.cwd / "runs" / run_id / ARTIFACT_FILE).snapshots] == [0]
    shell.run(command("printf "))
    for at, error in (
        (1_800, f"run {run_id} ends at tick 599; --at 1800 is past its end (snapshots at ticks [0])"),
        (600, f"run {run_id} ends at tick 599; --at 600 is past its end (snapshots at ticks [0])"),
        (300, f"run {run_id} has no snapshot at tick 300; snapshots at ticks [0]"),
    ):
        refused = shell.run(f".venv/bin/egbe fork runs/{run_id} --at {at} --config low-cap.toml")
        assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", f"egbe fork: {error}\n")
    assert shell.runs() == before | {run_id}  # refused before any run folder was written


def _health(shell: Shell, server: subprocess.Popen[str], ready: str) -> list[str]:
    """`egbe health`'s rows once the row of the service named `ready` says SERVING, while `server` runs."""
    deadline = time.monotonic() + SERVE_SECONDS
    while True:
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        health = shell.run(command(".venv/bin/egbe health"))
        rows = health.stdout.splitlines()
        if any(r.startswith(f"{ready} ") and r.split()[1] == "SERVING" for r in rows):
            return [str(health.returncode), *rows]
        assert time.monotonic() < deadline, health.stdout + health.stderr
        time.sleep(0.3)


@contextmanager
def serving(shell: Shell, line: str) -> Iterator[subprocess.Popen[str]]:
    """A README command that serves until stopped: started, then stopped with SIGTERM."""
    server = shell.start(line)
    try:
        yield server
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=SERVE_SECONDS) == 0


def test_egbe_up_serves_every_service_wired(shell: Shell) -> None:
    with serving(shell, command(".venv/bin/egbe up  ")) as server:
        code, *rows = _health(shell, server, "biography")
        published = json.loads((shell.cwd / ".egbe" / "endpoints.json").read_text())
        # Every service SERVING, the kernel with no note: its dispatcher reaches the gateway and biography.
        assert code == "0"
        assert [row.split() for row in rows] == [[name, "SERVING", published[name]] for name in SERVICE_NAMES]
    endpoints = EgbeSettings.model_fields["endpoints"].get_default(call_default_factory=True)
    assert endpoints == {
        name: Endpoint(host="127.0.0.1", port=50051 + i, metrics_port=9464 + i)
        for i, name in enumerate(SERVICE_NAMES)
    }


def test_egbe_up_on_unix_sockets(shell: Shell, tmp_path: Path) -> None:
    """`/run/egbe` is the machine's folder; the test serves in a folder of its own instead."""
    line = command(".venv/bin/egbe up --unix-socket-dir /run/egbe").replace("/run/egbe", str(tmp_path))
    with serving(shell, line) as server:
        code, *rows = _health(shell, server, "biography")
        assert code == "0"
        assert [row.split() for row in rows] == [
            [name, "SERVING", f"unix:{tmp_path / name}.sock"] for name in SERVICE_NAMES
        ]


def test_egbe_serve_kernel_alone_is_noted_unwired(shell: Shell) -> None:
    with serving(shell, command(".venv/bin/egbe serve kernel")) as server:
        code, kernel, *others = _health(shell, server, "kernel")
        assert code == "1"  # the other services are not served
        assert kernel.startswith("kernel     SERVING (")
        assert "gateway" in kernel
        assert "biography" in kernel
        assert [row.split()[0] for row in others] == [n for n in SERVICE_NAMES if n != "kernel"]
        assert all(row.split()[1] != "SERVING" for row in others)


def test_budget_worst_case_and_version(shell: Shell) -> None:
    budget = shell.run(command(".venv/bin/egbe budget worst-case --json"))
    assert budget.returncode == 0, budget.stderr
    assert json.loads(budget.stdout)["world_cap_held"] is True
    version = shell.run(command(".venv/bin/egbe version"))
    assert (version.returncode, version.stdout) == (
        0,
        f"egbe {metadata.version('egbe')} (protocol egbe.v1)\n",
    )
