"""The world's `egbe` subcommands: demo, replay and fork."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from assembly.embedded import DemoTarget
from assembly.settings import EgbeSettings
from world.scenario import builtin_scenario_names

if TYPE_CHECKING:
    from world.artifact import RunArtifact

DEFAULT_SCENARIO = "hamlet"
DEFAULT_SEED = 7
SettingsLoader = Callable[[argparse.Namespace], EgbeSettings]


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """What a user can get wrong or a service can refuse is reported in one clear line, not a traceback."""

    def guarded(args: argparse.Namespace) -> int:
        from world.artifact import ArtifactError
        from world.errors import WorldRunError
        from world.fork import ForkError
        from world.framing import FrameError
        from world.scenario import ScenarioError

        try:
            return run(args)
        except (ScenarioError, ArtifactError, FrameError, WorldRunError, ForkError) as exc:
            print(f"egbe {args.command}: {exc}", file=sys.stderr)
            return 2

    return guarded


def quiet_services(loaded: EgbeSettings) -> EgbeSettings:
    """Embedded services log warnings only under a world command, unless EGBE_LOG_LEVEL says otherwise."""
    if "EGBE_LOG_LEVEL" in os.environ:
        return loaded
    from services.logging import configure_logging

    configure_logging(loaded.log_format, "warning")
    return loaded.model_copy(update={"log_level": "warning"})


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser], settings: SettingsLoader) -> None:
    """Adds `demo`, `replay` and `fork` to the egbe CLI."""

    def cmd_demo(args: argparse.Namespace) -> int:
        from assembly.world_runs import run_demo
        from world.demo import exit_status, summary

        loaded = quiet_services(settings(args))
        shown: list[Path] = []

        def stay(run_dir: Path, artifact: RunArtifact) -> None:
            print(summary(run_dir, artifact))
            print("the run's services and console stay up; Ctrl-C stops them", flush=True)
            shown.append(run_dir)

        run_dir, artifact = asyncio.run(
            run_demo(
                loaded,
                args.scenario,
                args.seed,
                args.runs_dir,
                reduced_time=args.reduced_time,
                realtime=args.realtime,
                progress=not args.quiet,
                target=DemoTarget(args.target),
                console=loaded.console.enabled,
                stay=stay if args.stay else None,
            )
        )
        if not shown:
            print(summary(run_dir, artifact))
        return exit_status(artifact)

    def cmd_replay(args: argparse.Namespace) -> int:
        from assembly.world_runs import replay_run

        check = asyncio.run(replay_run(args.run_dir, quiet_services(settings(args))))
        if check.matches:
            print(f"matches ({check.ticks_compared:,} ticks)")
            return 0
        print(f"diverges at {check.divergence}\n  recorded: {check.recorded}\n  replayed: {check.fresh}")
        return 1

    def cmd_fork(args: argparse.Namespace) -> int:
        from assembly.world_runs import fork_run

        loaded = quiet_services(settings(args))
        print(asyncio.run(fork_run(args.run_dir, args.at, args.config, loaded, progress=not args.quiet)))
        return 0

    demo = commands.add_parser("demo", help="run a scenario against the services; write runs/<run-id>/")
    demo.add_argument("--scenario", default=DEFAULT_SCENARIO, help=f"{builtin_scenario_names()} or a file")
    demo.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"the world's random seed (default {DEFAULT_SEED})"
    )
    demo.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where runs/<run-id>/ is written (default runs)"
    )
    demo.add_argument("--reduced-time", action="store_true", help="run the scenario's reduced-time length")
    demo.add_argument("--realtime", action="store_true", help="pace ticks to the wall clock (20 Hz)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.add_argument(
        "--stay",
        action="store_true",
        help="keep the run's own services and console up after the run, until Ctrl-C",
    )
    demo.add_argument(
        "--target",
        choices=[t.value for t in DemoTarget],
        default=DemoTarget.AUTO.value,
        help="auto: running services if all SERVING, else embedded; embedded; running/compose: "
        "the services the settings name, which must be SERVING",
    )
    demo.set_defaults(run=_guarded(cmd_demo))

    replay = commands.add_parser("replay", help="re-run a run's tick log through a fresh kernel")
    replay.add_argument("run_dir", metavar="RUN", type=Path, help="the run folder (runs/<run-id>)")
    replay.set_defaults(run=_guarded(cmd_replay))

    fork = commands.add_parser(
        "fork", help="resume a run from its snapshot under another config; compare bills"
    )
    fork.add_argument("run_dir", metavar="RUN", type=Path, help="the run folder (runs/<run-id>)")
    fork.add_argument("--at", type=int, required=True, help="tick of a snapshot to resume from")
    fork.add_argument(
        "--config", type=Path, required=True, help="TOML settings for the fork (budget, routing)"
    )
    fork.add_argument("--quiet", action="store_true", help="no progress bar")
    fork.set_defaults(run=_guarded(cmd_fork))
