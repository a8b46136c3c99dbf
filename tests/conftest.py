"""Shared fixtures: an `egbe up` subprocess on ephemeral ports, and clients with each role's token."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from egbe.v1 import action_pb2, common_pb2, gateway_pb2
from gateway.config import GatewayConfig
from services import tracing
from services.runtime import METRICS_PREFIX

ROOT = Path(__file__).resolve().parent.parent

# Shared fixture modules: generated certificates and an `egbe up` serving mTLS.
pytest_plugins = ["tests.tls_fixtures"]

# Hypothesis's per-example deadline is a wall-clock assertion: on a shared 2-core machine it fails
# correct code. Examples are bounded by their count instead.
settings.register_profile("egbe", deadline=None)
settings.load_profile("egbe")


# A test's spend figures are one ledger window's (an hour, aligned to the clock): a test that began in
# the window's last seconds would see its runs split over two windows and its exact counts fail.
WINDOW_MARGIN_SECONDS = 30.0


@pytest.fixture
async def inside_one_ledger_window() -> None:
    """Start a test that reads exact spend figures with at least WINDOW_MARGIN_SECONDS left in the
    current ledger window: at most once an hour of suite time, the test waits for the next one."""
    window = GatewayConfig().ledger_window_seconds
    left = window - time.time() % window
    if left < WINDOW_MARGIN_SECONDS:
        await asyncio.sleep(left + 0.05)


@dataclass
class EmbeddedEgbe:
    """A running `egbe up` process: its endpoints and its generated tokens."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    targets: dict[str, str]
    tokens: dict[str, str]
    metrics: dict[str, str]  # service -> its Prometheus endpoint's URL
    http: dict[str, str]  # the HTTP listeners beside the gRPC ones: "edge", "console"


# What `egbe up` publishes beside its gRPC listeners (targets) and metrics endpoints.
HTTP_LISTENERS = ("edge", "console")


def start_embedded(
    data_dir: Path,
    *extra_args: str,
    timeout: float = 30.0,
    ephemeral_ports: bool = True,
    command: tuple[str, ...] = ("up",),
) -> EmbeddedEgbe:
    """Start `python -m assembly.cli up` (or `command`, e.g. `serve kernel`) and wait until it has
    published its endpoints.

    `ephemeral_ports=False` keeps the ports the settings (environment) name.
    """
    # Never the real model API from a test, whatever key a developer has exported.
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {"EGBE_LOG_FORMAT": "json"}
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "egbe-up.log"  # a file, not a pipe: a chatty server never blocks on a full pipe
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assembly.cli",
            "--data-dir",
            str(data_dir),
            *command,
            *(["--ephemeral-ports"] if ephemeral_ports else []),
            *extra_args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_path.open("ab"),
    )
    endpoints = data_dir / "endpoints.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"egbe up exited with {process.returncode}: {log_path.read_text()[-4000:]}")
        if endpoints.is_file():
            published = json.loads(endpoints.read_text())
            if published.get("pid") == process.pid:
                targets = {
                    k: v
                    for k, v in published.items()
                    if k not in {"pid", *HTTP_LISTENERS} and not k.startswith(METRICS_PREFIX)
                }
                http = {k: v for k, v in published.items() if k in HTTP_LISTENERS}
                metrics = {
                    k.removeprefix(METRICS_PREFIX): v
                    for k, v in published.items()
                    if k.startswith(METRICS_PREFIX)
                }
                tokens = json.loads((data_dir / "tokens.json").read_text())
                return EmbeddedEgbe(process, data_dir, targets, tokens, metrics, http)
        time.sleep(0.05)
    process.kill()
    raise TimeoutError("egbe up did not publish its endpoints in time")


def stop_embedded(egbe: EmbeddedEgbe) -> int:
    """SIGTERM and wait; returns the exit code."""
    if egbe.process.poll() is None:
        egbe.process.send_signal(signal.SIGTERM)
    try:
        return egbe.process.wait(timeout=30)
    finally:
        if egbe.process.poll() is None:
            egbe.process.kill()


@pytest.fixture(scope="session")
def embedded_egbe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    egbe = start_embedded(tmp_path_factory.mktemp("egbe-up"))
    yield egbe
    stop_embedded(egbe)


def _docker_engine_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
    except Exception:  # no engine, no socket, no permission: all mean "use the local server"
        return False
    return True


@pytest.fixture(scope="session")
def postgres_server_dsn() -> Iterator[str]:
    """A PostgreSQL server: testcontainers where a Docker engine runs, else EGBE_TEST_POSTGRES_DSN.

    Never skipped: without either, the tests that need PostgreSQL fail and say why.
    """
    if _docker_engine_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield container.get_connection_url()
        return
    dsn = os.environ.get("EGBE_TEST_POSTGRES_DSN")
    if not dsn:
        raise RuntimeError(
            "PostgreSQL tests need a Docker engine (testcontainers) or EGBE_TEST_POSTGRES_DSN, "
            "e.g. postgresql://postgres@127.0.0.1:5432/test (.ci/run sets it)"
        )
    yield dsn


@pytest.fixture
def postgres_dsn(postgres_server_dsn: str) -> Iterator[str]:
    """A fresh, empty database per test on that server, dropped afterwards, so runs never collide."""
    import uuid

    import psycopg
    from psycopg import sql

    name = f"egbe_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(postgres_server_dsn)
    info["dbname"] = name
    try:
        yield psycopg.conninfo.make_conninfo(**info)
    finally:
        with psycopg.connect(postgres_server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def dialogue_submit(call_id: str, ori_id: str, world_id: str) -> gateway_pb2.SubmitRequest:
    """A kernel's dialogue call as the gateway's Submit takes it (the call id is also its request id)."""
    return gateway_pb2.SubmitRequest(
        candidate=action_pb2.CognitionCallCandidate(
            call_id=call_id,
            ori=common_pb2.OriRef(tenant_id="t", world_id=world_id, ori_id=ori_id),
            tier=common_pb2.COGNITION_TIER_CLOTHO,
            cause=action_pb2.COGNITION_CAUSE_DIALOGUE,
        ),
        request_id=call_id,
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
        stimulus="Bram: is the bakery open today?",
    )


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every service's spans, exported to memory as each ends, every trace kept; tracing off after."""
    exporter = InMemorySpanExporter()
    tracing.install_exporter(exporter, ratio=1.0, batched=False)
    yield exporter
    tracing.install_exporter(None)


def chromium_path() -> str:
    """Debian's Chromium (scripts/install_system_deps.sh installs it); Playwright downloads no browser."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError("headless Chromium is required: apt-get install chromium (.ci/run installs it)")
