"""Only the kernel computes with numpy: the other services must not load it (nor its BLAS threads,
which spin a core at start and hold memory in every process that imports numpy)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "module",
    ["gateway.server", "cognition_service.server", "policy_service.server", "biography_service.server"],
)
def test_a_service_without_arrays_does_not_import_numpy(module: str) -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print('numpy' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "False", f"{module} imports numpy"
