"""The world's gRPC clients: one channel per service, each call carrying the right role's token.

The world is a client of services something else started: it is handed where they are (`Services`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from egbe.v1 import biography_pb2_grpc, gateway_pb2_grpc, kernel_pb2_grpc
from services.auth import Role, TokenStore, bearer_metadata
from services.channels import open_channel
from services.settings import ChassisSettings

Metadata = tuple[tuple[str, str], ...]


@dataclass
class Services:
    """Where the services are, the tokens to reach them, and whether this run started them."""

    targets: dict[str, str]
    tokens: TokenStore
    settings: ChassisSettings
    embedded: bool
    tick_log: Path | None  # the kernel's tick log of this run, when the run started the kernel
    metrics: dict[str, int] = field(default_factory=dict)  # service -> its metrics port on 127.0.0.1


@dataclass
class ServiceClients:
    """Stubs for the services a world talks to; the world is a client and nothing more."""

    channels: list[grpc.aio.Channel]
    kernel: kernel_pb2_grpc.KernelServiceAsyncStub
    gateway: gateway_pb2_grpc.CognitionGatewayServiceAsyncStub
    operator: gateway_pb2_grpc.OperatorServiceAsyncStub
    biography: biography_pb2_grpc.BiographyServiceAsyncStub
    world_md: Metadata
    operator_md: Metadata

    @classmethod
    def dial(cls, targets: dict[str, str], tokens: TokenStore, settings: ChassisSettings) -> ServiceClients:
        """Channels through the one channel factory, so TLS/mTLS settings apply to the world too."""
        kernel = open_channel(targets["kernel"], settings)
        gateway = open_channel(targets["gateway"], settings)
        biography = open_channel(targets["biography"], settings)
        return cls(
            channels=[kernel, gateway, biography],
            kernel=kernel_pb2_grpc.KernelServiceStub(kernel),
            gateway=gateway_pb2_grpc.CognitionGatewayServiceStub(gateway),
            operator=gateway_pb2_grpc.OperatorServiceStub(gateway),
            biography=biography_pb2_grpc.BiographyServiceStub(biography),
            world_md=bearer_metadata(tokens.token_for(Role.WORLD)),
            operator_md=bearer_metadata(tokens.token_for(Role.OPERATOR)),
        )

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(grace=None)
