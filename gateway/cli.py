"""`egbe ops ...` and `egbe audit export`: thin clients of OperatorService with the operator token."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import json_format

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.config import TIERS_BY_NAME
from gateway.servicer import OPERATOR_ID_METADATA
from services.auth import Role, bearer_metadata
from services.channels import open_channel
from services.runtime import load_tokens, operator_target
from services.settings import load_settings

SCOPES = {"ori": gateway_pb2.CONTROL_SCOPE_ORI, "tier": gateway_pb2.CONTROL_SCOPE_TIER}
SCOPES["tenant"] = gateway_pb2.CONTROL_SCOPE_TENANT
Command = Callable[
    ["gateway_pb2_grpc.OperatorServiceAsyncStub", tuple[tuple[str, str], ...], argparse.Namespace],
    Awaitable[Any],
]


def _run(args: argparse.Namespace, command: Command) -> int:
    overrides: dict[str, object] = {}
    if args.config is not None:
        overrides["config_file"] = args.config
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    settings = load_settings(**overrides)
    metadata = (
        *bearer_metadata(load_tokens(settings).token_for(Role.OPERATOR)),
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
    print(json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True), indent=2))


async def _kill(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    if args.scope == "ori":
        _print(
            await stub.KillOri(
                gateway_pb2.KillOriRequest(ori_id=args.target, reason=args.reason), metadata=metadata
            )
        )
    elif args.scope == "tier":
        tier = common_pb2.CognitionTier.ValueType(TIERS_BY_NAME.get(args.target, 0))
        _print(
            await stub.KillTier(gateway_pb2.KillTierRequest(tier=tier, reason=args.reason), metadata=metadata)
        )
    else:
        request = gateway_pb2.KillTenantRequest(tenant_id=args.target, reason=args.reason)
        _print(await stub.KillTenant(request, metadata=metadata))


async def _scoped(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    fields = {"scope": SCOPES[args.scope], "target": args.target, "reason": args.reason}
    if args.ops_command == "pause":
        _print(await stub.Pause(gateway_pb2.PauseRequest(**fields), metadata=metadata))
    elif args.ops_command == "resume":
        _print(await stub.Resume(gateway_pb2.ResumeRequest(**fields), metadata=metadata))
    else:
        _print(await stub.Quarantine(gateway_pb2.QuarantineRequest(**fields), metadata=metadata))


async def _list(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    token = ""
    for _ in range(100_000):
        page = await stub.ListControls(
            gateway_pb2.ListControlsRequest(include_inactive=args.all, page_size=500, page_token=token),
            metadata=metadata,
        )
        for control in page.controls:
            print(json.dumps(json_format.MessageToDict(control, preserving_proto_field_name=True)))
        token = page.next_page_token
        if not token:
            return


async def _spend(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    request = gateway_pb2.GetSpendRequest(world_id=args.world, tenant_id=args.tenant)
    _print(await stub.GetSpend(request, metadata=metadata))


async def _retry_stats(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    reply = await stub.GetRetryStats(gateway_pb2.GetRetryStatsRequest(limit=args.limit), metadata=metadata)
    print(json.dumps(json_format.MessageToDict(reply.stats), indent=2))


DECISIONS = {
    "all": gateway_pb2.OPERATOR_ATTEMPT_DECISION_UNSPECIFIED,
    "allowed": gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED,
    "refused": gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED,
}


async def _attempts(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    token = ""
    for _ in range(1_000_000):
        page = await stub.ListOperatorAttempts(
            gateway_pb2.ListOperatorAttemptsRequest(
                decision=DECISIONS[args.decision],
                method=args.method,
                operator_id=args.operator,
                page_size=500,
                page_token=token,
            ),
            metadata=metadata,
        )
        for attempt in page.attempts:
            print(json.dumps(json_format.MessageToDict(attempt, preserving_proto_field_name=True)))
        token = page.next_page_token
        if not token:
            return


async def _export(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    output: TextIO = sys.stdout if args.output is None else args.output.open("w")
    try:
        token = ""
        for _ in range(1_000_000):
            page = await stub.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(
                    ori_id=args.ori,
                    tier=TIERS_BY_NAME.get(args.tier, 0),  # type: ignore[arg-type]
                    run_id=args.run_id,
                    kernel_call_id=args.kernel_call_id,
                    page_size=500,
                    page_token=token,
                ),
                metadata=metadata,
            )
            for record in page.records:
                output.write(
                    json.dumps(json_format.MessageToDict(record, preserving_proto_field_name=True)) + "\n"
                )
            token = page.next_page_token
            if not token:
                return
    finally:
        if output is not sys.stdout:
            output.close()


def register(commands: Any) -> None:
    """Add `ops` and `audit` to the egbe CLI."""
    ops = commands.add_parser("ops", help="operator controls over the gateway (operator token)")
    ops_commands = ops.add_subparsers(dest="ops_command", required=True)
    kill = ops_commands.add_parser("kill", help="stop an Ori, a tier or a tenant now and refuse new work")
    kill.add_argument("scope", choices=list(SCOPES))
    kill.add_argument("target", help="Ori id, tier name (clotho|lachesis|atropos) or tenant id")
    kill.add_argument("--reason", required=True)
    kill.set_defaults(run=lambda args: _run(args, _kill))
    for name, text in (
        ("pause", "stop work on a scope until resumed"),
        ("resume", "lift every control on a scope"),
        ("quarantine", "isolate a scope pending review"),
    ):
        command = ops_commands.add_parser(name, help=text)
        command.add_argument("scope", choices=list(SCOPES))
        command.add_argument("target")
        command.add_argument("--reason", required=True)
        command.set_defaults(run=lambda args: _run(args, _scoped))
    listing = ops_commands.add_parser("list", help="active controls, one JSON object a line")
    listing.add_argument("--all", action="store_true", help="include lifted controls")
    listing.set_defaults(run=lambda args: _run(args, _list))
    spend = ops_commands.add_parser("spend", help="this window's ledger and spend by tier (JSON)")
    spend.add_argument("--world", default="")
    spend.add_argument("--tenant", default="")
    spend.set_defaults(run=lambda args: _run(args, _spend))
    stats = ops_commands.add_parser("retry-stats", help="calls, attempts, fallbacks and provider errors")
    stats.add_argument("--limit", type=int, default=0)
    stats.set_defaults(run=lambda args: _run(args, _retry_stats))
    attempts = ops_commands.add_parser(
        "attempts", help="every audited OperatorService attempt, allowed or refused, one JSON object a line"
    )
    attempts.add_argument("--decision", choices=list(DECISIONS), default="all")
    attempts.add_argument("--method", default="", help="e.g. KillOri, or KILL:ORI for a committed control")
    attempts.add_argument("--operator", default="", help="only this operator id")
    attempts.set_defaults(run=lambda args: _run(args, _attempts))

    audit = commands.add_parser("audit", help="the cognition-call audit log")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    export = audit_commands.add_parser("export", help="write audit records as JSONL")
    export.add_argument("--ori", default="")
    export.add_argument("--tier", default="", choices=["", *TIERS_BY_NAME])
    export.add_argument("--run-id", default="")
    export.add_argument("--kernel-call-id", default="", help="the kernel's cognition call id")
    export.add_argument("--output", type=Path, help="file to write (default stdout)")
    export.set_defaults(run=lambda args: _run(args, _export))
