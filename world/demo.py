"""`egbe demo`: run a scenario against the services and write runs/<run-id>/ (artifact, report, tick log);
the summary it prints and its exit status."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from world.artifact import ReplayCheck, RunArtifact, write_artifact
from world.clients import Services
from world.outcomes import describe_control, figures, headline, model_path_failure
from world.report import write_report
from world.report_story import conversation_summary
from world.run import RunOptions, execute, new_run_id
from world.run_folder import ARTIFACT_FILE, REPORT_FILE
from world.scenario import load_scenario


@dataclass(frozen=True)
class DemoRun:
    """One demo run about to start: its folder (made, empty), its id and its options."""

    run_dir: Path
    run_id: str
    options: RunOptions


def new_demo_run(
    scenario_name: str,
    seed: int,
    runs_dir: Path,
    *,
    reduced_time: bool = False,
    realtime: bool = False,
    progress: bool = True,
) -> DemoRun:
    """The scenario loaded and the run's folder made under `runs_dir`; a scenario that fails makes none."""
    scenario = load_scenario(scenario_name)
    options = RunOptions(scenario, seed, reduced_time=reduced_time, realtime=realtime, progress=progress)
    run_id = new_run_id(scenario, seed)
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    return DemoRun(run_dir, run_id, options)


async def execute_demo(demo: DemoRun, services: Services) -> RunArtifact:
    """Runs the scenario end to end against `services`; writes its artifact."""
    if not services.embedded:
        print("using the running Egbe services; their kernel's tick log is not this run's", file=sys.stderr)
    return await execute(services, options=demo.options, run_dir=demo.run_dir, run_id=demo.run_id)


def finish_demo(demo: DemoRun, artifact: RunArtifact, replay: ReplayCheck | None) -> RunArtifact:
    """Records the replay check, when one ran, in the artifact, and writes the report."""
    if replay is not None:
        artifact = artifact.model_copy(update={"replay": replay})
        write_artifact(artifact, demo.run_dir / ARTIFACT_FILE)
    write_report(artifact, demo.run_dir / REPORT_FILE)
    return artifact


def summary(run_dir: Path, artifact: RunArtifact) -> str:
    bill = artifact.bill
    label, sentence = headline(artifact)
    lines = [
        f"{label}: {sentence}",
        f"run        {artifact.run_id} ({artifact.ticks_run:,} ticks, "
        f"{artifact.population.get('total', 0):,} Ori, {artifact.wall_seconds:.1f} s)",
        *(f"{name:<16} {value}" for name, value in figures(artifact)),
        f"naive      {bill.naive_calls:,} calls (calls issued are {bill.relevance_ratio:.2%} of them); "
        f"world cap {bill.world_cap_tokens:,} tokens per hour",
    ]
    lines += [f"control    {describe_control(c)}" for c in artifact.controls]
    failure = model_path_failure(artifact)
    if failure:
        lines.append(f"FAILED     {failure}")
    if artifact.saturation is not None:
        s = artifact.saturation
        lines.append(
            f"game-hour  allowed {s.total_allowed_tokens:,} of {s.world_cap_tokens:,}, deferred "
            f"{s.total_deferred_tokens:,} (cap held: {s.world_cap_held})"
        )
    if artifact.conversations:
        lines.append(f"talk       conversations {conversation_summary(artifact.conversations)}")
    replay = artifact.replay
    if replay.checked:
        lines.append(f"replay     {'matches' if replay.matches else 'diverges at ' + replay.divergence}")
    lines += [f"artifact   {run_dir / ARTIFACT_FILE}", f"report     {run_dir / REPORT_FILE}"]
    return "\n".join(lines)


def exit_status(artifact: RunArtifact) -> int:
    """1 when the model path failed entirely (the summary's FAILED line says why), else 0."""
    return 1 if model_path_failure(artifact) else 0
