"""The one error a run raises when a service refuses or fails it, with the call and the reason."""

from __future__ import annotations

import grpc


class WorldRunError(RuntimeError):
    """The services refused or failed the run; the message says which call and why."""


def describe_rpc_error(what: str, exc: grpc.aio.AioRpcError) -> str:
    return f"{what} failed: {exc.code().name}: {exc.details()}"
