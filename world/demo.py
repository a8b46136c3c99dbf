"""`egbe demo`: run a scenario against the services and write runs/<run-id>/ (artifact, report, tick log)."""

from __future__ import annotations

import sys
from pathlib import Path

from services.settings import EgbeSettings
from world.artifact import RunArtifact, write_artifact
from world.embedded import DemoTarget, services_for_run
from world.outcomes import describe_control, figures, headline, model_path_failure
from world.report import write_report
from world.report_story import conversation_summary
from world.run import RunOptions, execute, new_run_id
from world.run_folder import ARTIFACT_FILE, REPORT_FILE
from world.scenario import load_scenario


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
) -> tuple[Path, RunArtifact]:
    """Runs one scenario end to end; returns the run folder and its artifact."""
    scenario = load_scenario(scenario_name)
    options = RunOptions(scenario, seed, reduced_time=reduced_time, realtime=realtime, progress=progress)
    run_id = new_run_id(scenario, seed)
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    async with services_for_run(settings, run_dir, scenario.snapshot_every_ticks, target) as services:
        if not services.embedded:
            print(
                "using the running Egbe services; their kernel's tick log is not this run's", file=sys.stderr
            )
        artifact = await execute(services, options=options, run_dir=run_dir, run_id=run_id)
    if check_replay and artifact.tick_log is not None:
        from world.replay import replay_run

        artifact = artifact.model_copy(update={"replay": await replay_run(run_dir, settings)})
        write_artifact(artifact, run_dir / ARTIFACT_FILE)
    write_report(artifact, run_dir / REPORT_FILE)
    return run_dir, artifact


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
