"""One run of a scenario against the services: set up, loop, collect, and write the run folder."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import grpc

from egbe.v1 import gateway_pb2, kernel_pb2
from services.fingerprint import fingerprint
from world.artifact import (
    Fingerprint,
    ReplayCheck,
    RunArtifact,
    ScenarioRecord,
    SnapshotRecord,
    SpendPoll,
    TickLogRecord,
    TierSeries,
    write_artifact,
)
from world.clients import ServiceClients, Services
from world.collect import (
    audit_records,
    audited_calls,
    bill,
    biographies,
    calls_issued,
    issued_calls,
    kill_records,
    saturation,
    tier_occupancy,
)
from world.controls import RunScope, list_controls, stopping_controls
from world.errors import WorldRunError, describe_rpc_error
from world.ledger import LedgerView, ledger_view, wait_for_dispatch
from world.loop import LoopHooks, LoopRecording, WorldLoop, WorldSetup, lift_run_controls
from world.outcomes import answered_by, outcomes
from world.population import build_population
from world.progress import ProgressBar
from world.registration import registration_request
from world.replay import tick_log_summary
from world.run_folder import ARTIFACT_FILE, RESULT_LOG_FILE, SNAPSHOT_DIR, TICK_LOG_FILE
from world.scenario import Scenario
from world.script import ScriptIndex
from world.simulation import WorldState, WorldStepper, initial_state
from world.story import issue_ticks


@dataclass(frozen=True)
class RunOptions:
    scenario: Scenario
    seed: int
    reduced_time: bool = False
    realtime: bool = False
    progress: bool = True
    ticks: int | None = None  # overrides the scenario's length (a fork runs to its parent's end)

    @property
    def end_tick(self) -> int:
        if self.ticks is not None:
            return self.ticks
        if self.reduced_time and self.scenario.reduced_duration_ticks is not None:
            return self.scenario.reduced_duration_ticks
        return self.scenario.duration_ticks


def new_run_id(scenario: Scenario, seed: int) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{scenario.name}-s{seed}-{stamp}"


def world_setup(scenario: Scenario, seed: int, world_id: str) -> WorldSetup:
    population = build_population(scenario, seed)
    return WorldSetup(
        scenario=scenario,
        population=population,
        seed=seed,
        world_id=world_id,
        script=ScriptIndex.build(scenario, population),
        stepper=WorldStepper(scenario, population, seed),
    )


def world_snapshot_path(run_dir: Path, tick: int) -> Path:
    return run_dir / SNAPSHOT_DIR / f"world-{tick:08d}.json"


def save_world_snapshot(run_dir: Path, tick: int, state: WorldState) -> None:
    path = world_snapshot_path(run_dir, tick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state.to_json()))


async def register(clients: ServiceClients, setup: WorldSetup) -> None:
    """Registers every Ori; the world addresses Ori by row, so the kernel must give slot i to row i."""
    request = registration_request(setup.population, setup.world_id, setup.scenario.tenant_id)
    try:
        reply = await clients.kernel.RegisterAgents(request, metadata=clients.world_md)
    except grpc.aio.AioRpcError as exc:
        raise WorldRunError(describe_rpc_error("RegisterAgents", exc)) from exc
    if list(reply.slots) != list(range(setup.population.size)):
        raise WorldRunError(
            "the kernel gave slots out of registration order; run against a fresh kernel for this world"
        )


async def restore_kernel(clients: ServiceClients, snapshot: kernel_pb2.KernelSnapshot) -> None:
    try:
        await clients.kernel.RestoreSnapshot(
            kernel_pb2.RestoreSnapshotRequest(snapshot=snapshot), metadata=clients.world_md
        )
    except grpc.aio.AioRpcError as exc:
        raise WorldRunError(describe_rpc_error("RestoreSnapshot", exc)) from exc


async def execute(
    services: Services,
    *,
    options: RunOptions,
    run_dir: Path,
    run_id: str,
    start: tuple[WorldState, kernel_pb2.KernelSnapshot] | None = None,
    forked_from: dict[str, object] | None = None,
) -> RunArtifact:
    """Runs the scenario (from `start`'s world and kernel state, for a fork) and writes artifact.json."""
    started_at = datetime.now(UTC).isoformat()
    wall = time.monotonic()
    scenario, seed = options.scenario, options.seed
    world_id = f"{scenario.name}-{seed}"
    setup = world_setup(scenario, seed, world_id)
    state = start[0].copy() if start is not None else initial_state(scenario, setup.population)
    clients = ServiceClients.dial(services.targets, services.tokens, services.settings)
    progress = ProgressBar(options.end_tick, enabled=options.progress)
    try:
        await register(clients, setup)
        ledger_start = await ledger_view(clients, world_id, scenario.tenant_id, since_unix_ms=0)
        scope = RunScope(world_id, scenario.tenant_id, time.time_ns() // 1_000_000)
        controls_before = await list_controls(clients, include_inactive=False)
        if start is None:
            save_world_snapshot(run_dir, 0, state)
        else:
            await restore_kernel(clients, start[1])
        with (run_dir / RESULT_LOG_FILE).open("wb") as result_log:
            hooks = LoopHooks(
                realtime=options.realtime,
                on_snapshot=lambda tick, s: save_world_snapshot(run_dir, tick, s),
                result_log=result_log,
            )
            loop_started = time.monotonic()
            loop = WorldLoop(clients, setup, progress, hooks, ledger_start)
            recording = await loop.run(state, options.end_tick)
            loop_seconds = time.monotonic() - loop_started
        ledger = await wait_for_dispatch(
            clients, world_id, scenario.tenant_id, ledger_start, issued=calls_issued(recording)
        )
        _close_spend(recording, ledger, time.monotonic() - loop_started)
        audit = await audit_records(clients, world_id)
        calls = audited_calls(audit, recording)
        controls_after = await list_controls(clients, include_inactive=True)
        await lift_run_controls(clients, world_id, recording.kills)
        run_outcomes = outcomes(calls)
        artifact = RunArtifact(
            run_id=run_id,
            created_at=started_at,
            egbe_version=_version(),
            scenario=ScenarioRecord(
                name=scenario.name,
                title=scenario.title,
                fingerprint=fingerprint(scenario.model_dump(mode="json")),
                document=scenario.model_dump(mode="json"),
            ),
            seed=seed,
            ticks_run=len(recording.ticks),
            reduced_time=options.reduced_time,
            answered_by=answered_by(run_outcomes),
            outcomes=run_outcomes,
            config_fingerprints=_fingerprints(recording, audit.values()),
            population={"total": setup.population.size, **tier_occupancy(recording)},
            featured=[i for i, f in zip(setup.population.ids, setup.population.featured, strict=True) if f],
            tiers=_series(recording),
            issued=issued_calls(recording),
            calls=calls,
            kills=kill_records(recording, calls),
            directives=recording.directives,
            biographies=await biographies(clients, setup.population),
            conversations=loop.story.conversations({c.run_id: c.tier for c in calls}),
            moments=loop.story.moment_records(
                issue_ticks({r.run_id: r.kernel_call_id for r in audit.values() if r.kernel_call_id})
            ),
            bill=bill(recording, calls, setup.population, ledger),
            spend=recording.spend,
            controls=stopping_controls(controls_before, controls_after, scope, recording.issued_calls, calls),
            saturation=await saturation(clients, recording, setup.population.ids),
            replay=ReplayCheck(checked=False),
            tick_log=_tick_log_record(services, run_dir),
            snapshots=_snapshots(run_dir),
            forked_from=forked_from,
            wall_seconds=round(time.monotonic() - wall, 3),
            loop_seconds=round(loop_seconds, 3),
        )
    finally:
        await clients.close()
    write_artifact(artifact, run_dir / ARTIFACT_FILE)
    return artifact


def _version() -> str:
    try:
        return metadata.version("egbe")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _close_spend(recording: LoopRecording, ledger: LedgerView, elapsed_seconds: float) -> None:
    """The drained ledger is the series' last reading, so the chart ends at the bill's tokens charged."""
    recording.spend.append(
        SpendPoll(
            tick=len(recording.ticks),
            elapsed_seconds=round(elapsed_seconds, 3),
            tokens_charged=ledger.consumed_tokens,
            micro_usd_charged=ledger.consumed_micro_usd,
            world_cap_tokens=ledger.world_cap_tokens,
        )
    )


def _fingerprints(recording: LoopRecording, audit: Iterable[gateway_pb2.AuditRecord]) -> list[Fingerprint]:
    found = dict(recording.fingerprints)
    for record in audit:
        if record.config_fingerprint.fnv1a64:
            found.setdefault(record.config_fingerprint.scope or "gateway", record.config_fingerprint.fnv1a64)
    return [Fingerprint(scope=scope, fnv1a64=value) for scope, value in sorted(found.items())]


def _series(recording: LoopRecording) -> TierSeries:
    return TierSeries(
        ticks=recording.ticks,
        clotho=recording.clotho,
        lachesis=recording.lachesis,
        atropos=recording.atropos,
        calls_issued=recording.calls_issued,
        estimated_tokens=recording.estimated_tokens,
    )


def _tick_log_record(services: Services, run_dir: Path) -> TickLogRecord | None:
    if services.tick_log is None or not services.tick_log.is_file():
        return None
    digest, frames = tick_log_summary(services.tick_log)
    return TickLogRecord(path=str(services.tick_log.relative_to(run_dir)), sha256=digest, frames=frames)


def _snapshots(run_dir: Path) -> list[SnapshotRecord]:
    folder = run_dir / SNAPSHOT_DIR
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("world-*.json")):
        tick = int(path.stem.removeprefix("world-"))
        out.append(
            SnapshotRecord(tick=tick, world_path=str(path.relative_to(run_dir)), kernel_path=TICK_LOG_FILE)
        )
    return out
