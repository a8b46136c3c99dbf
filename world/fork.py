"""`egbe fork`: resumes a run from its snapshot at a tick under another config and compares the two bills."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from egbe.v1 import kernel_pb2
from services.settings import EgbeSettings, load_settings
from world.artifact import RunArtifact, read_artifact
from world.embedded import DemoTarget, services_for_run
from world.replay import read_tick_log
from world.report import write_report
from world.report_bill import fork_table
from world.run import RunOptions, execute, new_run_id, world_snapshot_path
from world.run_folder import ARTIFACT_FILE, REPORT_FILE
from world.scenario import parse_scenario
from world.simulation import WorldState


class ForkError(ValueError):
    """A fork that cannot start: a tick past the run's end or with no snapshot, or a config that fails."""


def _kernel_snapshots(run_dir: Path, artifact: RunArtifact) -> dict[int, kernel_pb2.KernelSnapshot]:
    """The kernel's snapshots in the run's tick log, by the first tick they precede."""
    if artifact.tick_log is None:
        return {}
    _, records = read_tick_log(run_dir / artifact.tick_log.path)
    return {
        r.snapshot.last_tick + 1: r.snapshot
        for r in records
        if r.WhichOneof("entry") == "snapshot" and r.snapshot.has_ticked
    }


def _fork_start(run_dir: Path, artifact: RunArtifact, at_tick: int) -> kernel_pb2.KernelSnapshot | None:
    """The kernel state a fork at `at_tick` restores; None at tick 0, where a fresh kernel holds it.

    A fork needs the world's and the kernel's state before `at_tick`. Before tick 0 the kernel holds
    only the registrations, which the fork makes again; at a later tick both must have snapshotted
    (the scenario's snapshot_every_ticks: a reduced-time run shorter than that has tick 0 alone).
    """
    if not artifact.tiers.ticks:
        raise ForkError(f"run {artifact.run_id} ran no ticks; there is nothing to fork")
    last = artifact.tiers.ticks[-1]
    kernel = _kernel_snapshots(run_dir, artifact)
    usable = sorted(
        s.tick for s in artifact.snapshots if s.tick <= last and (s.tick == 0 or s.tick in kernel)
    )
    if at_tick > last:
        raise ForkError(
            f"run {artifact.run_id} ends at tick {last}; --at {at_tick} is past its end "
            f"(snapshots at ticks {usable})"
        )
    if at_tick not in usable:
        raise ForkError(
            f"run {artifact.run_id} has no snapshot at tick {at_tick}; snapshots at ticks {usable}"
        )
    return kernel.get(at_tick)


def _fork_settings(config: Path) -> EgbeSettings:
    try:
        return load_settings(config_file=config)
    except (ValueError, FileNotFoundError, ValidationError) as exc:
        raise ForkError(f"fork config {config} does not load: {exc}") from exc


async def fork_run(
    run_dir: Path, at_tick: int, config: Path, settings: EgbeSettings, progress: bool = True
) -> str:
    """Runs the parent's scenario from its snapshot at `at_tick` to its end under `config`; both bills."""
    parent = read_artifact(run_dir / ARTIFACT_FILE)
    snapshot = _fork_start(run_dir, parent, at_tick)
    fork_settings = _fork_settings(config).model_copy(
        update={"log_level": settings.log_level, "log_format": settings.log_format}
    )
    scenario = parse_scenario(parent.scenario.document, f"run {parent.run_id}")
    end_tick = parent.tiers.ticks[-1] + 1
    start = None
    if snapshot is not None:
        world = WorldState.from_json(json.loads(world_snapshot_path(run_dir, at_tick).read_text()))
        start = (world, snapshot)
    options = RunOptions(
        scenario, parent.seed, reduced_time=parent.reduced_time, progress=progress, ticks=end_tick
    )
    run_id = f"{new_run_id(scenario, parent.seed)}-fork-of-{parent.run_id}-at-{at_tick}"
    fork_dir = run_dir.parent / run_id
    fork_dir.mkdir(parents=True)
    forked_from: dict[str, object] = {"run_id": parent.run_id, "at_tick": at_tick, "config": str(config)}
    async with services_for_run(
        fork_settings, fork_dir, scenario.snapshot_every_ticks, DemoTarget.EMBEDDED
    ) as svc:
        artifact = await execute(
            svc,
            options=options,
            run_dir=fork_dir,
            run_id=run_id,
            start=start,
            forked_from=forked_from,
        )
    write_report(artifact, fork_dir / REPORT_FILE)
    table = fork_table(artifact, parent, at_tick)
    return f"{table}\nfork run   {fork_dir / ARTIFACT_FILE}\nreport     {fork_dir / REPORT_FILE}"
