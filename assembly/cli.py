"""The `egbe` command: run services, check health, inspect budgets, and run the demo.

A mistake of the user's (a setting, a file, a token) ends the command with a short message on stderr
and exit status 2; a traceback means a bug. Output cut short by its reader (`| head`) ends quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from assembly import world_cli
from assembly.console_host import serve_console_until_signalled
from assembly.health import check_health, kernel_notes
from assembly.launcher import serve_until_signalled
from assembly.settings import EgbeSettings, load_settings
from edge.server import serve_edge_until_signalled
from gateway.cli import register as register_gateway_commands
from services.logging import configure_logging
from services.runtime import endpoints_path, published_targets, run_event_loop
from services.settings import SERVICE_NAMES, Endpoint, UserError


def _settings(args: argparse.Namespace) -> EgbeSettings:
    overrides: dict[str, object] = {}
    if args.config is not None:
        overrides["config_file"] = args.config
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    settings = load_settings(**overrides)
    configure_logging(settings.log_format, settings.log_level)
    return settings


def _with_listen_overrides(settings: EgbeSettings, args: argparse.Namespace) -> EgbeSettings:
    """`--ephemeral-ports` binds port 0 everywhere; `--unix-socket-dir` serves on unix sockets."""
    endpoints = dict(settings.endpoints)
    for name, endpoint in endpoints.items():
        metrics = None if endpoint.metrics_port is None else 0  # any free port, published
        if args.unix_socket_dir is not None:
            endpoints[name] = Endpoint(
                host=endpoint.host,
                port=0,
                unix_socket=args.unix_socket_dir / f"{name}.sock",
                metrics_port=metrics,
            )
        elif args.ephemeral_ports:
            endpoints[name] = Endpoint(host=endpoint.host, port=0, metrics_port=metrics)
    update: dict[str, object] = {"endpoints": endpoints}
    if args.ephemeral_ports:
        update["edge"] = settings.edge.model_copy(update={"port": 0})
        update["console"] = settings.console.model_copy(update={"port": 0})
    return settings.model_copy(update=update)


def cmd_health(args: argparse.Namespace) -> int:
    settings = _settings(args)
    targets = published_targets(settings)
    if args.service:
        targets = {name: targets[name] for name in args.service}
    statuses = asyncio.run(check_health(targets, args.timeout, settings))
    shown = dict(statuses)
    if statuses.get("kernel") == "SERVING":
        notes = asyncio.run(kernel_notes(targets["kernel"], args.timeout, settings))
        shown["kernel"] = " ".join(["SERVING", *(f"({note})" for note in notes)])
    for name, status in shown.items():
        print(f"{name:<10} {status:<24} {targets[name]}")
    return 0 if all(s == "SERVING" for s in statuses.values()) else 1


def cmd_probe(args: argparse.Namespace) -> int:
    """Container health: every service this data dir's `egbe serve`/`egbe up` published must be SERVING."""
    settings = _settings(args)
    path = endpoints_path(settings)
    if not path.is_file():
        print(f"NOT STARTED: no endpoints published at {path}")
        return 1
    published = json.loads(path.read_text())
    targets = {name: published[name] for name in SERVICE_NAMES if name in published}
    statuses = asyncio.run(check_health(targets, args.timeout, settings))
    failing = {name: status for name, status in statuses.items() if status != "SERVING"}
    if not targets or failing:
        print(f"UNHEALTHY: {failing or 'no service published'}")
        return 1
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    settings = _with_listen_overrides(_settings(args), args)
    run_event_loop(
        serve_until_signalled(
            SERVICE_NAMES, settings, edge=settings.edge.enabled, console=settings.console.enabled
        )
    )
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    """The operator console in its own process, reading the services a running `egbe up` published,
    else the endpoints the settings name."""
    settings = _settings(args)
    if args.port is not None:
        settings = settings.model_copy(
            update={"console": settings.console.model_copy(update={"port": args.port})}
        )
    run_event_loop(serve_console_until_signalled(settings))
    return 0


def cmd_edge(args: argparse.Namespace) -> int:
    """The edge in its own process, forwarding to the services a running `egbe up` published, else to
    the endpoints the settings name."""
    settings = _settings(args)
    run_event_loop(serve_edge_until_signalled(settings, published_targets(settings)))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _with_listen_overrides(_settings(args), args)
    run_event_loop(serve_until_signalled([args.service], settings))
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    try:
        version = metadata.version("egbe")
    except metadata.PackageNotFoundError:
        version = "0+unknown (not installed)"
    print(f"egbe {version} (protocol egbe.v1)")
    return 0


def cmd_budget_worst_case(args: argparse.Namespace) -> int:
    from gateway.budget import evaluate_budget, resolve_world_cap, worst_case_requests
    from gateway.config import TIER_NAMES, BudgetConfig

    config = BudgetConfig()
    evaluation = evaluate_budget(worst_case_requests(config), config, resolve_world_cap(config))
    tiers: dict[str, dict[str, int]] = {}
    for allocation in evaluation.allocations:
        tier = tiers.setdefault(
            TIER_NAMES[allocation.request.tier],
            {"requests": 0, "requested_tokens": 0, "allowed_tokens": 0, "deferred_tokens": 0},
        )
        tier["requests"] += 1
        tier["requested_tokens"] += allocation.request.requested_tokens
        tier["allowed_tokens"] += allocation.allowed_tokens
        tier["deferred_tokens"] += allocation.deferred_tokens
    report = {
        "world_cap_tokens": evaluation.world_cap_tokens,
        "total_allowed_tokens": evaluation.total_allowed_tokens,
        "total_deferred_tokens": evaluation.total_deferred_tokens,
        "world_cap_held": evaluation.world_cap_held,
        "tiers": tiers,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"world cap        {report['world_cap_tokens']:>14,} tokens / real hour")
        for name, tier in tiers.items():
            print(f"{name:<9} allowed {tier['allowed_tokens']:>14,}  deferred {tier['deferred_tokens']:>14,}")
        allowed, deferred = evaluation.total_allowed_tokens, evaluation.total_deferred_tokens
        print(f"total     allowed {allowed:>14,}  deferred {deferred:>14,}")
        print(f"cap held: {evaluation.world_cap_held}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egbe", description=__doc__)
    parser.add_argument("--config", type=Path, help="TOML settings file (below EGBE_* env in precedence)")
    parser.add_argument("--data-dir", type=Path, help="where embedded state lives (default .egbe)")
    commands = parser.add_subparsers(dest="command", required=True)

    def listen_options(command: argparse.ArgumentParser) -> None:
        command.add_argument("--ephemeral-ports", action="store_true", help="bind port 0 (tests)")
        command.add_argument("--unix-socket-dir", type=Path, help="serve on unix sockets in this folder")

    up = commands.add_parser("up", help="serve every service in one process (embedded)")
    listen_options(up)
    up.set_defaults(run=cmd_up)

    edge = commands.add_parser(
        "edge", help="serve the HTTP/JSON and WebSocket edge alone, in front of running services"
    )
    edge.set_defaults(run=cmd_edge)

    console = commands.add_parser(
        "console", help="serve the operator console (web) alone, in front of running services"
    )
    console.add_argument("--port", type=int, help="HTTP port (default: console.port, 8040)")
    console.set_defaults(run=cmd_console)

    serve = commands.add_parser("serve", help="serve one service")
    serve.add_argument("service", choices=SERVICE_NAMES, help="the service to serve")
    listen_options(serve)
    serve.set_defaults(run=cmd_serve)

    health = commands.add_parser(
        "health",
        help="print each service's gRPC health (a kernel's notes what its dispatcher lacks); "
        "non-zero unless all SERVING",
    )
    health.add_argument(
        "--timeout", type=float, default=3.0, help="seconds to wait for each service (default 3)"
    )
    health.add_argument(
        "--service", action="append", choices=SERVICE_NAMES, help="check only this service (repeatable)"
    )
    health.set_defaults(run=cmd_health)

    probe = commands.add_parser(
        "probe", help="container/pod health check: exit 0 iff every locally served service is SERVING"
    )
    probe.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for each service (default 2)"
    )
    probe.set_defaults(run=cmd_probe)

    commands.add_parser("version", help="print the version").set_defaults(run=cmd_version)

    budget = commands.add_parser("budget", help="budget arithmetic")
    budget_commands = budget.add_subparsers(dest="budget_command", required=True)
    worst = budget_commands.add_parser("worst-case", help="the launch-ceiling Solo world against the cap")
    worst.add_argument("--json", action="store_true", help="print JSON instead of a table")
    worst.set_defaults(run=cmd_budget_worst_case)

    register_gateway_commands(commands, _settings)
    world_cli.register(commands, _settings)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        sys.stdout.flush()
    except UserError as error:
        for line in str(error).splitlines():
            print(f"egbe: {line}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (`egbe ... | head`): the rest of the output is nobody's. Python's
        # documented remedy: point stdout at devnull so the flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
