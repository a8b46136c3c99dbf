"""`egbe fork`: resumes a run from its snapshot at a tick under another config and compares the two bills;
the services it runs against are started by the caller, under the fork's config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from egbe.v1 import kernel_pb2
from world.artifact import RunArtifact, read_artifact
from world.clients import Services
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


@dataclass(frozen=True)
class ForkPlan:
    """A fork checked and ready to run: where it writes, what it runs and the state it starts from."""

    parent: RunArtifact
    at_tick: int
    fork_dir: Path
    run_id: str
    options: RunOptions
    start: tuple[WorldState, kernel_pb2.KernelSnapshot] | None
    forked_from: dict[str, object]


def plan_fork(run_dir: Path, at_tick: int, config: Path, progress: bool = True) -> ForkPlan:
    """The parent's scenario from its snapshot at `at_tick` to its end; ForkError when it cannot be."""
    parent = read_artifact(run_dir / ARTIFACT_FILE)
    snapshot = _fork_start(run_dir, parent, at_tick)
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
    forked_from: dict[str, object] = {"run_id": parent.run_id, "at_tick": at_tick, "config": str(config)}
    return ForkPlan(parent, at_tick, run_dir.parent / run_id, run_id, options, start, forked_from)


async def run_fork(plan: ForkPlan, services: Services) -> str:
    """Runs the fork against `services` (started under the fork's config); both bills, side by side."""
    artifact = await execute(
        services,
        options=plan.options,
        run_dir=plan.fork_dir,
        run_id=plan.run_id,
        start=plan.start,
        forked_from=plan.forked_from,
    )
    write_report(artifact, plan.fork_dir / REPORT_FILE)
    table = fork_table(artifact, plan.parent, plan.at_tick)
    return f"{table}\nfork run   {plan.fork_dir / ARTIFACT_FILE}\nreport     {plan.fork_dir / REPORT_FILE}"
