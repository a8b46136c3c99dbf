"""gRPC core's transport setting (`services/__init__.py`): in place before any entry point loads grpc
(gRPC core reads it once, then), an operator's own setting kept, and given to every process a test or a
benchmark starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services import GRPC_CORE_EXPERIMENTS
from services.local_cluster import ServiceProcesses

ROOT = Path(__file__).resolve().parents[2]


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    return env | extra


def _first_imports(module: str) -> list[str]:
    """The modules `python -m module --help` imports, in the order they finish loading."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        cwd=ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return [line.rsplit("|", 1)[1].strip() for line in lines[1:]]  # (the first line is the header)


@pytest.mark.parametrize("entry_point", ["assembly.cli", "bench.gateway_overhead", "bench.system_load"])
def test_every_entry_point_sets_it_before_grpc_loads(entry_point: str) -> None:
    imported = _first_imports(entry_point)
    assert "grpc" in imported
    assert imported.index("services") < imported.index("grpc")


def test_it_is_the_default_and_an_operators_own_setting_wins() -> None:
    def setting(env: dict[str, str]) -> str:
        show = "import services, os; print(os.environ['GRPC_EXPERIMENTS'])"
        done = subprocess.run(
            [sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert setting(_environment()) == GRPC_CORE_EXPERIMENTS
    assert setting(_environment(GRPC_EXPERIMENTS="-event_engine_client")) == "-event_engine_client"
    assert setting(_environment(GRPC_EXPERIMENTS="")) == ""


def test_the_processes_a_test_starts_get_this_processs_setting(tmp_path: Path) -> None:
    assert ServiceProcesses(tmp_path, None).env()["GRPC_EXPERIMENTS"] == os.environ["GRPC_EXPERIMENTS"]
