"""End-to-end wall time and ticks/s of the hamlet and solo-ceiling demos over real gRPC (embedded services).

Prints one JSON object. Each scenario runs through `egbe demo`'s own code path (services started for the
run, offline adapter unless ANTHROPIC_API_KEY is set), without the replay check. The baseline measured in
the same run is the naive every-agent-every-tick design: `naive_calls` = Ori x ticks, against the calls the
kernel actually issued. Read the times as the figures of the machine that ran them.

    python -m bench.world_demo --json                    # hamlet + the full solo-ceiling game-hour
    python -m bench.world_demo --json --solo-ticks 1200  # a shorter solo-ceiling window
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from assembly.embedded import DemoTarget, services_for_run
from assembly.settings import EgbeSettings, load_settings
from assembly.world_runs import run_demo
from services.logging import configure_logging
from services.settings import SERVICE_NAMES, Endpoint, LogFormat
from world.artifact import RunArtifact
from world.run import RunOptions, execute, new_run_id
from world.scenario import load_scenario

GAME_HOUR_TICKS = 72_000


def _figures(artifact: RunArtifact) -> dict[str, object]:
    bill = artifact.bill
    return {
        "ori": artifact.population["total"],
        "ticks": artifact.ticks_run,
        "wall_seconds": artifact.wall_seconds,
        "loop_seconds": artifact.loop_seconds,
        "ticks_per_second": round(artifact.ticks_run / artifact.loop_seconds, 1)
        if artifact.loop_seconds
        else None,
        "calls_issued": bill.calls_issued,
        "naive_calls": bill.naive_calls,
        "calls_to_naive_ratio": round(bill.relevance_ratio, 6),
        "model_calls_run": bill.model_calls_run,
        "ledger_tokens": bill.consumed_tokens,
        "answered_by": artifact.answered_by,
        "saturation": None
        if artifact.saturation is None
        else {
            "allowed_tokens": artifact.saturation.total_allowed_tokens,
            "deferred_tokens": artifact.saturation.total_deferred_tokens,
            "cap_held": artifact.saturation.world_cap_held,
        },
    }


def embedded_settings(data_dir: Path) -> EgbeSettings:
    """Settings for services embedded in the benchmark's process, on ports the system picks."""
    return load_settings(
        data_dir=data_dir, endpoints={n: Endpoint(port=0) for n in SERVICE_NAMES}, log_level="warning"
    )


async def run_embedded(settings: EgbeSettings, options: RunOptions, runs: Path) -> RunArtifact:
    """One run through `egbe demo`'s own code path with its services embedded, in a new folder under
    `runs` (no replay check)."""
    run_id = new_run_id(options.scenario, options.seed)
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    snapshot_every = options.scenario.snapshot_every_ticks
    async with services_for_run(settings, run_dir, snapshot_every, target=DemoTarget.EMBEDDED) as svc:
        return await execute(svc, options=options, run_dir=run_dir, run_id=run_id)


async def _solo(settings_dir: Path, runs: Path, ticks: int) -> RunArtifact:
    options = RunOptions(load_scenario("solo-ceiling"), 7, progress=False, ticks=ticks)
    return await run_embedded(embedded_settings(settings_dir), options, runs)


async def _bench(solo_ticks: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as scratch:
        root = Path(scratch)
        settings = embedded_settings(root / "data")
        _, hamlet = await run_demo(settings, "hamlet", 7, root / "runs", progress=False, check_replay=False)
        solo = await _solo(root / "data-solo", root / "runs", solo_ticks)
    return {
        "benchmark": "world_demo",
        "hamlet": _figures(hamlet),
        "solo_ceiling": {**_figures(solo), "game_hour": solo_ticks == GAME_HOUR_TICKS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output form)")
    parser.add_argument("--solo-ticks", type=int, default=GAME_HOUR_TICKS, help="solo-ceiling ticks to run")
    args = parser.parse_args(argv)
    configure_logging(
        LogFormat.JSON, "warning"
    )  # service logs go to stderr; stdout holds the one JSON object
    print(json.dumps(asyncio.run(_bench(args.solo_ticks)), indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
