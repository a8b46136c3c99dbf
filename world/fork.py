"""`egbe fork`: resumes a run from its snapshot at a tick under another config and compares the two bills."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from egbe.v1 import kernel_pb2
from services.settings import EgbeSettings, load_settings
from world.artifact import RunArtifact, read_artifact
from world.embedded import DemoTarget, services_for_run
from world.replay import read_tick_log
from world.report import write_report
from world.run import RunOptions, execute, new_run_id, world_snapshot_path
from world.run_folder import ARTIFACT_FILE, REPORT_FILE
from world.scenario import parse_scenario
from world.simulation import WorldState


class ForkError(ValueError):
    """A fork that cannot start: a tick past the run's end or with no snapshot, or a config that fails."""


@dataclass(frozen=True)
class BillColumn:
    """One run's bill over the ticks a fork shares with its parent."""

    label: str
    world_cap_tokens: int
    calls_issued: int
    model_calls: int
    tokens_used: int
    micro_usd: int
    ledger_tokens: int
    blocked_by_world_cap: int
    killed: int


def bill_from(artifact: RunArtifact, from_tick: int, label: str) -> BillColumn:
    """Calls issued on ticks >= from_tick, and model calls whose results came back on those ticks."""
    issued = sum(
        n for t, n in zip(artifact.tiers.ticks, artifact.tiers.calls_issued, strict=True) if t >= from_tick
    )
    after = [c for c in artifact.calls if c.merged_at_tick is not None and c.merged_at_tick >= from_tick]
    return BillColumn(
        label=label,
        world_cap_tokens=artifact.bill.world_cap_tokens,
        calls_issued=issued,
        model_calls=len(after),
        tokens_used=sum(c.input_tokens + c.output_tokens for c in after),
        micro_usd=sum(c.cost_micro_usd for c in after),
        ledger_tokens=artifact.bill.consumed_tokens,
        blocked_by_world_cap=artifact.bill.blocked_by_world_cap,
        killed=artifact.bill.killed,
    )


def side_by_side(parent: BillColumn, fork: BillColumn, at_tick: int, end_tick: int) -> str:
    rows = [
        ("world cap (tokens)", parent.world_cap_tokens, fork.world_cap_tokens),
        ("calls issued", parent.calls_issued, fork.calls_issued),
        ("model calls run", parent.model_calls, fork.model_calls),
        ("tokens used", parent.tokens_used, fork.tokens_used),
        ("cost (micro-USD)", parent.micro_usd, fork.micro_usd),
        ("ledger tokens (whole run)", parent.ledger_tokens, fork.ledger_tokens),
        ("held back by the cap", parent.blocked_by_world_cap, fork.blocked_by_world_cap),
        ("refused by a kill switch", parent.killed, fork.killed),
    ]
    width = max(len(parent.label), len(fork.label), 14)
    lines = [
        f"bills for ticks {at_tick}..{end_tick - 1}",
        f"{'':<26} {parent.label:>{width}} {fork.label:>{width}}",
    ]
    lines += [f"{name:<26} {a:>{width},} {b:>{width},}" for name, a, b in rows]
    return "\n".join(lines)


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
    table = side_by_side(
        bill_from(parent, at_tick, "parent"), bill_from(artifact, at_tick, "fork"), at_tick, end_tick
    )
    return f"{table}\nfork run   {fork_dir / ARTIFACT_FILE}\nreport     {fork_dir / REPORT_FILE}"
