"""Every Egbe service as its own OS process (`egbe serve X`) on loopback, each one killable with
SIGKILL and restartable, as production runs them.

The system tests (`tests/system/`) and the system benchmarks (`bench/`) both launch services this
way, so it lives in the package rather than in either of them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.auth import Role
from services.settings import SERVICE_NAMES

# Dependencies first; stopped in reverse.
START_ORDER = ("biography", "policy", "gateway", "cognition", "kernel")
assert set(START_ORDER) == set(SERVICE_NAMES)


def free_ports(count: int) -> list[int]:
    """Ports free right now; every process must know every port before any starts."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


TRACING_VARIABLES = ("EGBE_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "EGBE_TRACE_SAMPLE_RATIO")


@dataclass
class ServiceProcesses:
    """Five `egbe serve` processes sharing one tokens file, one database and fixed ports."""

    root: Path
    database_url: str | None  # None: each service's own SQLite files
    ports: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Niceness and CPU sets per service (e.g. the throughput services apart from the kernel's tick
    # path on a shared box, as a deployment gives the kernel its own CPU beside the world server).
    niceness: dict[str, int] = field(default_factory=dict)
    cpus: dict[str, set[int]] = field(default_factory=dict)
    # Settings every process gets on top of the shared environment (e.g. a benchmark's world cap).
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ports = dict(zip(SERVICE_NAMES, free_ports(len(SERVICE_NAMES)), strict=True))
        self.tokens = {role.value: secrets.token_urlsafe(24) for role in Role}
        self.root.mkdir(parents=True, exist_ok=True)
        tokens_file = self.root / "tokens.json"
        tokens_file.write_text(json.dumps(self.tokens))
        tokens_file.chmod(0o600)

    def env(self) -> dict[str, str]:
        """The production environment every process (services and clients) shares."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            # gRPC core's transport as this process has it (services/__init__.py), so that a run with an
            # operator's own setting (a benchmark's baseline, say) gives it to every process.
            "GRPC_EXPERIMENTS": os.environ["GRPC_EXPERIMENTS"],
            "EGBE_MODE": "production",
            "EGBE_LOG_FORMAT": "json",
            "EGBE_TOKENS_FILE": str(self.root / "tokens.json"),
            "EGBE_KERNEL__GATEWAY_TARGET": self.target("gateway"),
            "EGBE_KERNEL__BIOGRAPHY_TARGET": self.target("biography"),
            "EGBE_KERNEL__POLICY_TARGET": self.target("policy"),
        }
        env |= {f"EGBE_ENDPOINTS__{name.upper()}__PORT": str(port) for name, port in self.ports.items()}
        if self.database_url is not None:
            env["EGBE_DATABASE_URL"] = self.database_url
        # Traced where the launching process is (a benchmark comparing tracing on and off).
        env |= {name: os.environ[name] for name in TRACING_VARIABLES if name in os.environ}
        return env | self.extra_env

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def start(self, name: str, timeout: float = 30.0) -> None:
        """Start `egbe serve name` and return once its gRPC health says SERVING."""
        self._spawn(name)
        self._await_serving(name, timeout)

    def _spawn(self, name: str) -> None:
        data_dir = self.root / name
        data_dir.mkdir(exist_ok=True)
        nice = ["nice", "-n", str(self.niceness[name])] if name in self.niceness else []
        pin = ["taskset", "-c", ",".join(map(str, sorted(self.cpus[name])))] if name in self.cpus else []
        self.running[name] = subprocess.Popen(
            [*pin, *nice, sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "serve", name],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=(data_dir / "serve.log").open("ab"),
        )

    def _await_serving(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running[name].poll() is not None:
                log = (self.root / name / "serve.log").read_text()[-3000:]
                raise RuntimeError(f"egbe serve {name} exited with {self.running[name].returncode}: {log}")
            if self.serving(name):
                return
            time.sleep(0.1)
        raise TimeoutError(f"egbe serve {name} was not SERVING within {timeout} s")

    def serving(self, name: str) -> bool:
        with grpc.insecure_channel(self.target(name)) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def start_all(self, timeout: float = 60.0) -> None:
        """All at once: peers are dialled lazily, so no service needs another to be up to start."""
        for name in START_ORDER:
            self._spawn(name)
        for name in START_ORDER:
            self._await_serving(name, timeout)

    def kill(self, name: str) -> None:
        """SIGKILL: no drain, no goodbye."""
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every process, newest dependents first; their exit codes."""
        codes = {}
        for name in reversed(START_ORDER):
            process = self.running.pop(name, None)
            if process is None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                codes[name] = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait(timeout=30)
        return codes
