"""The world's runs against services started for them: `egbe demo` (embedded services or the running
ones), `egbe replay` (a fresh kernel of its own) and `egbe fork` (embedded services under the fork's
config). The world runs the scenario and compares; this module starts and stops what it runs against."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from pydantic import ValidationError

from assembly.console_host import wait_for_stop
from assembly.embedded import DemoTarget, services_for_run
from assembly.launcher import start_services, stop_services
from assembly.settings import EgbeSettings, load_settings
from egbe.v1 import kernel_pb2
from services.runtime import load_tokens
from services.settings import Endpoint
from world.artifact import ReplayCheck, RunArtifact
from world.clients import ServiceClients
from world.demo import execute_demo, finish_demo, new_demo_run
from world.fork import ForkError, plan_fork, run_fork
from world.replay import compare_replay, open_replay


async def run_demo(
    settings: EgbeSettings,
    scenario_name: str,
    seed: int,
    runs_dir: Path,
    *,
    reduced_time: bool = False,
    realtime: bool = False,
    progress: bool = True,
    check_replay: bool = True,
    target: DemoTarget = DemoTarget.AUTO,
    console: bool = False,
    stay: Callable[[Path, RunArtifact], None] | None = None,
) -> tuple[Path, RunArtifact]:
    """Runs one scenario end to end, then replays its tick log; returns the run folder and its artifact.

    With `console`, the run's own services are served by the operator console too. With `stay`, the
    finished run is handed to `stay` and the run's own services (and console) keep serving until
    SIGINT or SIGTERM, so a newcomer can look around."""
    demo = new_demo_run(
        scenario_name, seed, runs_dir, reduced_time=reduced_time, realtime=realtime, progress=progress
    )
    snapshot_every = demo.options.scenario.snapshot_every_ticks

    async def finished(artifact: RunArtifact) -> RunArtifact:
        replay = None
        if check_replay and artifact.tick_log is not None:
            replay = await replay_run(demo.run_dir, settings)
        return finish_demo(demo, artifact, replay)

    async with services_for_run(settings, demo.run_dir, snapshot_every, target, console=console) as services:
        artifact = await execute_demo(demo, services)
        if stay is not None and services.embedded:
            artifact = await finished(artifact)
            stay(demo.run_dir, artifact)
            await wait_for_stop()
            return demo.run_dir, artifact
    return demo.run_dir, await finished(artifact)


@asynccontextmanager
async def fresh_kernel(
    settings: EgbeSettings, config: kernel_pb2.TickLogConfig
) -> AsyncIterator[ServiceClients]:
    """A kernel service of its own, configured as the log recorded, with no dispatcher targets and no log."""
    kernel_settings = settings.kernel
    recorded = type(kernel_settings.config).model_validate_json(config.canonical_json)
    with tempfile.TemporaryDirectory(prefix="egbe-replay-") as scratch:
        folder = Path(scratch)
        endpoints = dict(settings.endpoints)
        endpoints["kernel"] = Endpoint(port=0, unix_socket=folder / "kernel.sock")
        isolated = settings.model_copy(
            update={
                "data_dir": folder,
                "endpoints": endpoints,
                "kernel": kernel_settings.model_copy(
                    update={
                        "config": recorded,
                        "tick_log_path": None,
                        "gateway_target": None,
                        "biography_target": None,
                    }
                ),
            }
        )
        running = await start_services(["kernel"], isolated)
        targets = {name: endpoint.target() for name, endpoint in endpoints.items()}
        targets["kernel"] = running[0].target
        clients = ServiceClients.dial(targets, load_tokens(isolated), isolated)
        try:
            yield clients
        finally:
            await clients.close()
            await stop_services(running, isolated)


async def replay_run(run_dir: Path, settings: EgbeSettings) -> ReplayCheck:
    """matches, or the first divergent field path with the recorded and the replayed value."""
    logs = open_replay(run_dir)
    async with fresh_kernel(settings, logs.config) as clients:
        return await compare_replay(logs, clients)


def _fork_settings(config: Path) -> EgbeSettings:
    try:
        return load_settings(config_file=config)
    except (ValueError, FileNotFoundError, ValidationError) as exc:
        raise ForkError(f"fork config {config} does not load: {exc}") from exc


async def fork_run(
    run_dir: Path, at_tick: int, config: Path, settings: EgbeSettings, progress: bool = True
) -> str:
    """Runs the parent's scenario from its snapshot at `at_tick` to its end under `config`; both bills."""
    plan = plan_fork(run_dir, at_tick, config, progress)
    fork_settings = _fork_settings(config).model_copy(
        update={"log_level": settings.log_level, "log_format": settings.log_format}
    )
    plan.fork_dir.mkdir(parents=True)
    snapshot_every = plan.options.scenario.snapshot_every_ticks
    async with services_for_run(fork_settings, plan.fork_dir, snapshot_every, DemoTarget.EMBEDDED) as svc:
        return await run_fork(plan, svc)
