"""Renders deploy/k8s with kubectl's built-in kustomize (no cluster needed)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "deploy" / "k8s"
TREES = {
    "base": K8S / "base",
    "production": K8S / "overlays" / "production",
    "monitoring": K8S / "overlays" / "monitoring",
    "world-server-example": K8S / "examples" / "world-server",
}


def render(tree: str) -> list[dict[str, Any]]:
    """The manifests `kubectl kustomize` builds from one tree."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("rendering deploy/k8s needs kubectl (its built-in kustomize); it ships on CI")
    result = subprocess.run(
        [kubectl, "kustomize", str(TREES[tree])], capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {TREES[tree]} failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session", params=list(TREES))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)
