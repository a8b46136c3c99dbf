"""Finds running Egbe services, or starts the embedded ones for one run, wired to each other."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import StrEnum
from pathlib import Path

from assembly.console_host import console_beside, published_console
from assembly.health import check_health
from assembly.launcher import KERNEL_PEER_TARGETS, start_services, stop_services
from assembly.settings import EgbeSettings
from console.serving import RunningConsole
from gateway.server import build_store
from services.runtime import client_tokens, load_tokens, published_targets
from services.server import RunningService
from services.settings import SERVICE_NAMES, Endpoint, UserError
from world.clients import Services
from world.errors import WorldRunError
from world.run_folder import SERVICES_DIR, TICK_LOG_FILE


class DemoTarget(StrEnum):
    """Which services a run uses (`egbe demo --target`)."""

    AUTO = "auto"  # the running services when all answer SERVING, else embedded ones for this run
    EMBEDDED = "embedded"  # always embedded services private to this run
    RUNNING = "running"  # the services the settings name; refuse to run when any is not SERVING
    COMPOSE = "compose"  # the containers of deploy/compose.yaml: RUNNING, named for the deployment


# How long a health check may take: a glance when falling back is possible, longer when it is not.
_AUTO_HEALTH_DEADLINE_SECONDS = 1.0
_REQUIRED_HEALTH_DEADLINE_SECONDS = 10.0


def _wired(
    settings: EgbeSettings, socket_dir: Path, data_dir: Path, tick_log: Path, snapshot_every: int
) -> EgbeSettings:
    """Unix sockets named in advance, so each service can be told where the others are before any starts;
    a service whose settings serve metrics serves them on a free port of the run's own."""
    endpoints = {
        name: Endpoint(
            port=0,
            unix_socket=socket_dir / f"{name}.sock",
            metrics_port=None if settings.endpoints[name].metrics_port is None else 0,
        )
        for name in SERVICE_NAMES
    }
    targets = {name: endpoint.target() for name, endpoint in endpoints.items()}
    kernel = settings.kernel.model_copy(
        update={
            "tick_log_path": tick_log,
            "snapshot_every_ticks": snapshot_every,
            **{setting: targets[service] for service, setting in KERNEL_PEER_TARGETS.items()},
        }
    )
    return settings.model_copy(update={"endpoints": endpoints, "data_dir": data_dir, "kernel": kernel})


@asynccontextmanager
async def services_for_run(
    settings: EgbeSettings,
    run_dir: Path,
    snapshot_every: int,
    target: DemoTarget = DemoTarget.AUTO,
    *,
    console: bool = False,
) -> AsyncIterator[Services]:
    """The running services or embedded ones private to this run, as `target` says. With `console`, the
    run's embedded services are served by an operator console too, and its address is printed (or the
    address of the console the running services publish)."""
    targets = published_targets(settings)
    if target is not DemoTarget.EMBEDDED:
        required = target in {DemoTarget.RUNNING, DemoTarget.COMPOSE}
        deadline = _REQUIRED_HEALTH_DEADLINE_SECONDS if required else _AUTO_HEALTH_DEADLINE_SECONDS
        statuses = await check_health(targets, deadline, settings)
        if all(status == "SERVING" for status in statuses.values()):
            published = published_console(settings) if console else None
            if published is not None:
                print(f"console    {published}", file=sys.stderr, flush=True)
            yield Services(targets, client_tokens(settings), settings, embedded=False, tick_log=None)
            return
        if required:
            down = {name: status for name, status in statuses.items() if status != "SERVING"}
            raise WorldRunError(f"--target {target.value} needs every service SERVING; not serving: {down}")
    tick_log = run_dir / TICK_LOG_FILE
    with tempfile.TemporaryDirectory(prefix="egbe-") as socket_dir:
        wired = _wired(settings, Path(socket_dir), run_dir / SERVICES_DIR, tick_log, snapshot_every)
        await carry_eval_scores(settings, wired)
        running = await start_services(SERVICE_NAMES, wired)
        shown = None
        try:
            if console and settings.console.enabled:
                shown = await _demo_console(wired, running)
            yield Services(
                {r.bundle.name: r.target for r in running},
                load_tokens(wired),
                wired,
                embedded=True,
                tick_log=tick_log,
                metrics={r.bundle.name: r.metrics.port for r in running if r.metrics is not None},
            )
        finally:
            if shown is not None:
                await shown.stop()
            await stop_services(running, wired)


async def carry_eval_scores(settings: EgbeSettings, run: EgbeSettings) -> None:
    """The run's embedded gateway keeps a store of its own (SQLite under the run's folder): it routes by the
    scores `egbe eval` recorded in the data directory's store, copied in before it starts."""
    if run.database_url or run.data_dir == settings.data_dir:
        return  # (one store for both)
    source = build_store(settings)
    await source.open()
    try:
        scores = await source.load_eval_scores()
    finally:
        await source.close()
    if not len(scores):  # nothing recorded: nothing to carry
        return
    target = build_store(run)
    await target.open()
    try:
        await target.record_eval_scores(list(scores), operator_id="egbe-demo")
    finally:
        await target.close()


async def _demo_console(settings: EgbeSettings, running: list[RunningService]) -> RunningConsole:
    """The console for a demo's own services, on its configured port or, when that is taken (an
    `egbe up` serving its own console), on any free one; its address printed either way."""
    tokens = load_tokens(settings)
    try:
        shown = await console_beside(settings, running, tokens)
    except UserError:
        any_port = settings.console.model_copy(update={"port": 0})
        shown = await console_beside(settings.model_copy(update={"console": any_port}), running, tokens)
    where = settings.data_dir / "tokens.json"
    print(f"console    {shown.url} (sign in with the operator token in {where})", file=sys.stderr, flush=True)
    return shown
