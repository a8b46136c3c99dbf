"""`egbe demo --target running|compose` uses the services the settings name, or refuses to run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("target", ["running", "compose"])
def test_required_services_not_serving_is_a_clear_refusal(target: str, tmp_path: Path) -> None:
    ports = {
        f"EGBE_ENDPOINTS__{n}__PORT": "1" for n in ("KERNEL", "GATEWAY", "COGNITION", "POLICY", "BIOGRAPHY")
    }
    result = subprocess.run(
        [
            *(sys.executable, "-m", "assembly.cli", "--data-dir", str(tmp_path / "cli")),
            *("demo", "--target", target, "--quiet", "--runs-dir", str(tmp_path / "runs")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", **ports},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--target {target} needs every service SERVING" in result.stderr
    assert not list((tmp_path / "runs").glob("*/artifact.json"))  # nothing ran on embedded services
