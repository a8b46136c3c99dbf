"""Runs one `egbe serve <service>` as a child process and waits for the endpoint it publishes.

Benchmarks and crash tests need a real server they can SIGKILL; both start it the same way here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ServedProcess:
    """A started `egbe serve` child: where it answers, and the service token it generated."""

    process: subprocess.Popen[bytes]
    target: str
    token: str


def serve_in_subprocess(
    service: str, data_dir: Path, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> ServedProcess:
    """Start `egbe serve <service>` on ephemeral ports under `data_dir`; returns once it has published.

    Only this process's publication counts (the file names its pid), so a stale endpoints file left
    by an earlier, killed server in the same data dir is never mistaken for this one.
    """
    child_env = {**os.environ, "EGBE_LOG_FORMAT": "json", **(env or {})}
    command = [sys.executable, "-m", "services.cli", "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [*command, "serve", service, "--ephemeral-ports"],
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    endpoints = data_dir / "endpoints.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"egbe serve {service} exited with {process.returncode}")
        if endpoints.is_file():
            published = json.loads(endpoints.read_text())
            if published.get("pid") == process.pid:
                token = json.loads((data_dir / "tokens.json").read_text())["service"]
                return ServedProcess(process, published[service], token)
        time.sleep(0.05)
    process.kill()
    process.wait(timeout=timeout)
    raise TimeoutError(f"egbe serve {service} did not publish its endpoint")
