"""`egbe ops ...` and `egbe audit export`: thin clients of OperatorService with the operator token; and
`egbe eval` (`gateway/evals/cli.py`), which records the eval scores routing reads."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import duration_pb2

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway import cli_worlds
from gateway.cli_output import duration_seconds, plain, print_pages
from gateway.config import TIERS_BY_NAME
from gateway.evals import cli as eval_cli
from gateway.operator_wire import OPERATOR_ID_METADATA
from services.auth import Role, bearer_metadata
from services.channels import open_channel
from services.runtime import client_tokens, operator_target
from services.settings import ChassisSettings

SCOPES = {"ori": gateway_pb2.CONTROL_SCOPE_ORI, "tier": gateway_pb2.CONTROL_SCOPE_TIER}
SCOPES["tenant"] = gateway_pb2.CONTROL_SCOPE_TENANT
SCOPES["world"] = gateway_pb2.CONTROL_SCOPE_WORLD
Command = Callable[
    ["gateway_pb2_grpc.OperatorServiceAsyncStub", tuple[tuple[str, str], ...], argparse.Namespace],
    Awaitable[Any],
]
SettingsLoader = Callable[[argparse.Namespace], ChassisSettings]
WATCH_SECONDS = 1.0  # how often `egbe ops spend --watch` refreshes


def _run(args: argparse.Namespace, settings: ChassisSettings, command: Command) -> int:
    metadata = (
        *bearer_metadata(client_tokens(settings).token_for(Role.OPERATOR)),
        (OPERATOR_ID_METADATA, getpass.getuser()),
    )

    async def call() -> Any:
        async with open_channel(operator_target(settings), settings) as channel:
            return await command(gateway_pb2_grpc.OperatorServiceStub(channel), metadata, args)

    try:
        asyncio.run(call())
    except grpc.aio.AioRpcError as error:
        print(f"egbe: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    return 0


def _print(message: Any) -> None:
    print(json.dumps(plain(message), indent=2))


def _scoping(args: argparse.Namespace) -> dict[str, Any]:
    """A control request's optional world and expiry (`--world`, `--for`)."""
    fields: dict[str, Any] = {"world_id": args.world}
    if args.expires_after is not None:
        fields["expires_after"] = duration_pb2.Duration(seconds=args.expires_after)
    return fields


async def _kill(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    reason, scoping = args.reason, _scoping(args)
    if args.scope == "ori":
        request = gateway_pb2.KillOriRequest(ori_id=args.target, reason=reason, **scoping)
        _print(await stub.KillOri(request, metadata=metadata))
    elif args.scope == "tier":
        tier = common_pb2.CognitionTier.ValueType(TIERS_BY_NAME.get(args.target, 0))
        _print(
            await stub.KillTier(
                gateway_pb2.KillTierRequest(tier=tier, reason=reason, **scoping), metadata=metadata
            )
        )
    elif args.scope == "tenant":
        request_tenant = gateway_pb2.KillTenantRequest(tenant_id=args.target, reason=reason, **scoping)
        _print(await stub.KillTenant(request_tenant, metadata=metadata))
    else:  # a world's kill names the world as its target (no --world)
        expiry = {"expires_after": scoping["expires_after"]} if "expires_after" in scoping else {}
        request_world = gateway_pb2.KillWorldRequest(world_id=args.target, reason=reason, **expiry)
        _print(await stub.KillWorld(request_world, metadata=metadata))


async def _scoped(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    fields = {"scope": SCOPES[args.scope], "target": args.target, "reason": args.reason}
    if args.ops_command == "resume":
        request = gateway_pb2.ResumeRequest(world_id=args.world, **fields)
        _print(await stub.Resume(request, metadata=metadata))
    elif args.ops_command == "pause":
        _print(await stub.Pause(gateway_pb2.PauseRequest(**fields, **_scoping(args)), metadata=metadata))
    else:
        request_q = gateway_pb2.QuarantineRequest(**fields, **_scoping(args))
        _print(await stub.Quarantine(request_q, metadata=metadata))


async def _list(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    await print_pages(
        lambda token: stub.ListControls(
            gateway_pb2.ListControlsRequest(include_inactive=args.all, page_size=500, page_token=token),
            metadata=metadata,
        ),
        lambda page: page.controls,
    )


async def _spend(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    """The spend once, or (`--watch`) one JSON line a second until Ctrl-C."""
    request = gateway_pb2.GetSpendRequest(world_id=args.world, tenant_id=args.tenant)
    if not args.watch:
        _print(await stub.GetSpend(request, metadata=metadata))
        return
    interrupted = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted.set)
    while not interrupted.is_set():
        print(json.dumps(plain(await stub.GetSpend(request, metadata=metadata))), flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(interrupted.wait(), WATCH_SECONDS)


async def _retry_stats(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    reply = await stub.GetRetryStats(gateway_pb2.GetRetryStatsRequest(limit=args.limit), metadata=metadata)
    print(json.dumps(plain(reply.stats), indent=2))


DECISIONS = {
    "all": gateway_pb2.OPERATOR_ATTEMPT_DECISION_UNSPECIFIED,
    "allowed": gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED,
    "refused": gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED,
}


async def _attempts(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    await print_pages(
        lambda token: stub.ListOperatorAttempts(
            gateway_pb2.ListOperatorAttemptsRequest(
                decision=DECISIONS[args.decision],
                method=args.method,
                operator_id=args.operator,
                page_size=500,
                page_token=token,
            ),
            metadata=metadata,
        ),
        lambda page: page.attempts,
    )


async def _export(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    output: TextIO = sys.stdout if args.output is None else args.output.open("w")
    try:
        await print_pages(
            lambda token: stub.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(
                    ori_id=args.ori,
                    tier=TIERS_BY_NAME[args.tier] if args.tier else 0,  # type: ignore[arg-type]
                    run_id=args.run_id,
                    kernel_call_id=args.kernel_call_id,
                    page_size=500,
                    page_token=token,
                ),
                metadata=metadata,
            ),
            lambda page: page.records,
            output,
        )
    finally:
        if output is not sys.stdout:
            output.close()


def register(commands: Any, settings: SettingsLoader) -> None:
    """Add `ops` and `audit` to the egbe CLI; `settings` loads the settings the global options name."""

    def client(command: Command) -> Callable[[argparse.Namespace], int]:
        return lambda args: _run(args, settings(args), command)

    ops = commands.add_parser("ops", help="operator controls over the gateway (operator token)")
    ops_commands = ops.add_subparsers(dest="ops_command", required=True)
    for name, text, command_run in (
        ("kill", "stop an Ori, a tier or a tenant now and refuse new work", _kill),
        ("pause", "stop work on a scope until resumed", _scoped),
        ("resume", "lift every control on a scope", _scoped),
        ("quarantine", "isolate a scope pending review", _scoped),
    ):
        command = ops_commands.add_parser(name, help=text)
        command.add_argument(
            "scope", choices=list(SCOPES), help="what TARGET names: an Ori, a tier, a tenant or a world"
        )
        command.add_argument(
            "target", help="Ori id, tier name (clotho|lachesis|atropos), tenant id or world id"
        )
        command.add_argument("--reason", required=True, help="why, for the audit log (required)")
        command.add_argument(
            "--world",
            default="",
            help="only runs of this world (resume: only controls scoped to it); not with the world scope",
        )
        if name != "resume":
            command.add_argument(
                "--for",
                dest="expires_after",
                type=duration_seconds,
                help="the control expires after this long, e.g. 90s, 10m, 2h, 1d (default: until resumed)",
            )
        command.set_defaults(run=client(command_run))
    listing = ops_commands.add_parser("list", help="active controls, one JSON object a line")
    listing.add_argument("--all", action="store_true", help="include lifted controls")
    listing.set_defaults(run=client(_list))
    spend = ops_commands.add_parser("spend", help="this window's ledger and spend by tier (JSON)")
    spend.add_argument("--world", default="", help="this world's ledger (default: the cap alone)")
    spend.add_argument("--tenant", default="", help="only this tenant's spend")
    spend.add_argument("--watch", action="store_true", help="print it again every second until Ctrl-C")
    spend.set_defaults(run=client(_spend))
    stats = ops_commands.add_parser("retry-stats", help="calls, attempts, fallbacks and provider errors")
    stats.add_argument(
        "--limit",
        type=int,
        default=0,
        help="roll up the N most recent ended runs (default: the configured window)",
    )
    stats.set_defaults(run=client(_retry_stats))
    attempts = ops_commands.add_parser(
        "attempts", help="every audited OperatorService attempt, allowed or refused, one JSON object a line"
    )
    attempts.add_argument(
        "--decision", choices=list(DECISIONS), default="all", help="only allowed or refused attempts"
    )
    attempts.add_argument("--method", default="", help="e.g. KillOri, or KILL:ORI for a committed control")
    attempts.add_argument("--operator", default="", help="only this operator id")
    attempts.set_defaults(run=client(_attempts))
    cli_worlds.register(ops_commands, client)

    audit = commands.add_parser("audit", help="the cognition-call audit log")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    export = audit_commands.add_parser("export", help="write audit records as JSONL")
    export.add_argument("--ori", default="", help="only this Ori id's calls")
    export.add_argument("--tier", choices=list(TIERS_BY_NAME), help="only this tier's calls")
    export.add_argument("--run-id", default="", help="only this cognition run")
    export.add_argument("--kernel-call-id", default="", help="the kernel's cognition call id")
    export.add_argument("--output", type=Path, help="file to write (default stdout)")
    export.set_defaults(run=client(_export))
    eval_cli.register(commands, settings)
