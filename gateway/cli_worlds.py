"""`egbe ops worlds`, `egbe ops cap set` and `egbe ops budget set`: the worlds the gateway's ledger knows,
and the limits an operator changes at run time."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.cli_output import count, plain, print_pages
from gateway.config import TIERS_BY_NAME

Command = Callable[["gateway_pb2_grpc.OperatorServiceAsyncStub", Any, argparse.Namespace], Awaitable[Any]]
Client = Callable[[Command], Callable[[argparse.Namespace], int]]


async def _worlds(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    await print_pages(
        lambda token: stub.ListWorlds(
            gateway_pb2.ListWorldsRequest(page_size=500, page_token=token), metadata=metadata
        ),
        lambda page: page.worlds,
    )


async def _cap_set(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    request = gateway_pb2.SetWorldCapRequest(
        world_id=args.world, tokens_per_hour=args.tokens_per_hour, reason=args.reason
    )
    print(json.dumps(plain(await stub.SetWorldCap(request, metadata=metadata)), indent=2))


async def _budget_set(
    stub: gateway_pb2_grpc.OperatorServiceAsyncStub, metadata: Any, args: argparse.Namespace
) -> None:
    changes = {
        name: value
        for name in ("max_model_calls", "max_tool_calls", "max_tokens")
        if (value := getattr(args, name)) is not None
    }
    request = gateway_pb2.SetRunBudgetRequest(
        tier=common_pb2.CognitionTier.ValueType(TIERS_BY_NAME[args.tier]), reason=args.reason, **changes
    )
    print(json.dumps(plain(await stub.SetRunBudget(request, metadata=metadata)), indent=2))


def register(ops_commands: Any, client: Client) -> None:
    """Add `worlds`, `cap set` and `budget set` to `egbe ops`."""
    reason = "why, for the operator audit log (required)"
    worlds = ops_commands.add_parser(
        "worlds",
        help="every world the ledger knows: spend (tokens, USD), cap, calls and controls, a JSON line each",
    )
    worlds.set_defaults(run=client(_worlds))

    cap = ops_commands.add_parser("cap", help="change a world's cap at run time (every gateway applies it)")
    cap_set = cap.add_subparsers(dest="cap_command", required=True).add_parser(
        "set", help="set a world's cap"
    )
    cap_set.add_argument("--world", required=True, help="the world whose cap changes")
    cap_set.add_argument(
        "--tokens-per-hour", type=count, required=True, help="the new cap, tokens per ledger window (an hour)"
    )
    cap_set.add_argument("--reason", required=True, help=reason)
    cap_set.set_defaults(run=client(_cap_set))

    budget = ops_commands.add_parser(
        "budget", help="change a tier's per-run budget at run time (runs admitted from then on)"
    )
    budget_set = budget.add_subparsers(dest="budget_command", required=True).add_parser(
        "set", help="set a tier's per-run budget; options left out keep their value"
    )
    budget_set.add_argument("--tier", required=True, choices=list(TIERS_BY_NAME), help="the tier to change")
    budget_set.add_argument("--max-model-calls", type=count, help="model calls a run may make (1..1000)")
    budget_set.add_argument("--max-tool-calls", type=count, help="tool calls a run may make (0..1000)")
    budget_set.add_argument(
        "--max-tokens", type=count, help="tokens a run reserves and may use (1..10000000)"
    )
    budget_set.add_argument("--reason", required=True, help=reason)
    budget_set.set_defaults(run=client(_budget_set))
