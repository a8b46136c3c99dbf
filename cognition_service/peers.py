"""The substrates the stages are handed (gateway, policy, biography) as Protocols over protocol messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from egbe.v1 import biography_pb2, gateway_pb2, policy_pb2


class GatewayPort(Protocol):
    """The only way to a model: one governed call inside an admitted run."""

    async def generate(self, request: gateway_pb2.GenerateRequest) -> gateway_pb2.GenerateResponse: ...


class PolicyPort(Protocol):
    async def ground(self, request: policy_pb2.GroundRequest) -> policy_pb2.GroundResponse: ...

    async def gate(self, request: policy_pb2.GateRequest) -> policy_pb2.GateResponse: ...


class BiographyPort(Protocol):
    async def rehydrate(self, request: biography_pb2.RehydrateRequest) -> biography_pb2.RehydrateResponse: ...

    async def append(self, request: biography_pb2.AppendRequest) -> biography_pb2.AppendResponse: ...


@dataclass(frozen=True)
class Peers:
    gateway: GatewayPort
    policy: PolicyPort
    biography: BiographyPort
