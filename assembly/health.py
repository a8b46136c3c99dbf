"""Asks services for their gRPC health: `egbe health`, `egbe probe`, and a world run choosing between
running services and embedded ones."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from assembly.settings import load_settings
from services.channels import open_channel
from services.settings import ChassisSettings


async def check_health(
    targets: dict[str, str], deadline_seconds: float, settings: ChassisSettings | None = None
) -> dict[str, str]:
    """Health status name per service ("SERVING", "NOT_SERVING", "UNREACHABLE: ...").

    Dials through the channel factory, so TLS/mTLS apply; `settings` defaults to the environment's.
    """
    dial_settings = settings if settings is not None else load_settings()

    async def one(target: str) -> str:
        async with open_channel(target, dial_settings) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=deadline_seconds)
            except grpc.aio.AioRpcError as exc:
                return f"UNREACHABLE: {exc.code().name}"
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    names = list(targets)
    statuses = await asyncio.gather(*(one(targets[n]) for n in names))
    return dict(zip(names, statuses, strict=True))


async def kernel_notes(target: str, deadline_seconds: float, settings: ChassisSettings) -> list[str]:
    """What a serving kernel cannot do: each dispatch target it lacks, from its own health names.

    A name the kernel does not know (NOT_FOUND) says nothing; NOT_SERVING adds that name's note.
    """
    from kernel_service.server import UNWIRED_NOTES  # only when asked: the kernel is heavy to import

    async with open_channel(target, settings) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        notes = []
        for name, note in UNWIRED_NOTES.items():
            try:
                reply = await stub.Check(
                    health_pb2.HealthCheckRequest(service=name), timeout=deadline_seconds
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    notes.append(f"{name} unanswered: {exc.code().name}")
                continue
            if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                notes.append(note)
        return notes
