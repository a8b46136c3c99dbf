"""`egbe eval`: run the shipped eval suites against model classes' routes and record each target's score
in the gateway store, where routing reads it (docs/gateway.md "Routing and cost")."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gateway.config import TIER_NAMES, GatewayConfig, GatewayServiceSettings
from gateway.evals.runner import TargetResult, class_targets, offline_target, run_suite
from gateway.evals.suite import SUITE_NAMES, load_suite, unknown_suite
from gateway.routing import config_violations, routing_violations
from gateway.server import build_store
from services.errors import EgbeError
from services.settings import ChassisSettings, UserError

SettingsLoader = Callable[[argparse.Namespace], ChassisSettings]


def evaluations(
    config: GatewayConfig, suite: str | None, model_class: str | None, *, offline: bool = False
) -> list[tuple[str, str]]:
    """The (suite, class) pairs to run. Online: both named, that pair; a suite alone, against the class
    each tier scored on it selects; a class alone, on every suite; neither (or --all), each tier's suite
    against its selected class, the evidence the gateway needs to start. Offline: every suite (or the one
    named), labelled with the class named or else the one its tier selects."""
    candidates = [c.model_class for c in config.routing.candidates]
    if suite is not None and suite not in SUITE_NAMES:
        raise unknown_suite(suite)
    if model_class is not None and model_class not in candidates:
        raise UserError(
            f"unknown model class {model_class!r}; routing.candidates has: {', '.join(candidates)}"
        )
    selected: dict[str, str] = {}
    for tier in TIER_NAMES:
        route = config.routing.route_for(tier)
        selected.setdefault(route.eval_suite, route.selected_model_class)
    suites = [suite] if suite else list(SUITE_NAMES)
    if offline or model_class is not None:
        return [(name, model_class or selected.get(name, "")) for name in suites]
    pairs = [(name, selected[name]) for name in selected if suite in (None, name)]
    if not pairs:
        raise UserError(f"no tier is scored on {suite}; name the class to run it against with --class")
    return pairs


def _report(results: list[TargetResult], model_class: str, recorded_at_ms: int) -> dict[str, Any]:
    suite = results[0].suite
    return {
        "suite": suite.name,
        "version": suite.version,
        "class": model_class,
        "class_score_bp": min(result.score_bp for result in results),
        "targets": [
            {
                "provider": result.provider,
                "model_id": result.model_id,
                "score_bp": result.score_bp,
                "cases": len(result.cases),
                "checks_passed": result.checks_passed,
                "checks_total": result.checks_total,
                "failed_checks": result.failed_checks(),
                "offline": result.offline,
                "recorded_at": datetime.fromtimestamp(recorded_at_ms / 1000, UTC).isoformat(),
            }
            for result in results
        ],
    }


async def _evaluate(settings: GatewayServiceSettings, args: argparse.Namespace) -> None:
    config = settings.gateway
    violations = routing_violations(config.routing) if args.offline else config_violations(config)
    if violations:
        raise UserError("\n".join(f"{v.field}: {v.description}" for v in violations))
    pairs = evaluations(config, args.suite, args.model_class, offline=args.offline)
    store = build_store(settings)
    await store.open()
    try:
        for suite_name, model_class in pairs:
            targets = [offline_target()] if args.offline else class_targets(config, model_class)
            try:
                results = await run_suite(load_suite(suite_name), targets, model_class)
            finally:
                for target in targets:
                    await target.adapter.close()
            now_ms = int(time.time() * 1000)
            await store.record_eval_scores(
                [result.recorded(now_ms) for result in results], operator_id=getpass.getuser()
            )
            print(json.dumps(_report(results, model_class, now_ms)), flush=True)
    finally:
        await store.close()


def _run(args: argparse.Namespace, load: SettingsLoader) -> int:
    settings = load(args)
    if not isinstance(settings, GatewayServiceSettings):
        raise TypeError("egbe eval needs the gateway's settings")
    try:
        asyncio.run(_evaluate(settings, args))
    except EgbeError as error:
        print(f"egbe: {error.code.name}: {error.message}", file=sys.stderr)
        return 1
    return 0


def register(commands: Any, settings: SettingsLoader) -> None:
    """Add `eval` to the egbe CLI; `settings` loads the settings the global options name."""
    command = commands.add_parser(
        "eval",
        help="score model classes on the shipped eval suites and record the scores routing reads",
        description="Runs each case of a suite through every target of a class's route and records each"
        " target's score in the gateway store; prints one JSON object a line per suite and class. With no"
        " --suite (or --all): each tier's suite against the class it selects.",
    )
    which = command.add_mutually_exclusive_group()
    which.add_argument("--suite", help=f"one suite: {', '.join(SUITE_NAMES)}")
    which.add_argument("--all", action="store_true", help="every tier's suite against its selected class")
    command.add_argument(
        "--class",
        dest="model_class",
        help="the model class to score (default: the class each tier scored on the suite selects)",
    )
    command.add_argument(
        "--offline",
        action="store_true",
        help="score the offline adapter instead of the class's route (every suite unless --suite)",
    )
    command.set_defaults(run=lambda args: _run(args, settings))
