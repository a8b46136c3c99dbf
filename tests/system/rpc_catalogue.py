"""Every RPC of egbe-protocol with its call shape, the Egbe service serving it and a role it admits."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass

from assembly.launcher import BUNDLE_BUILDERS
from egbe.v1 import biography_pb2, cognition_pb2, gateway_pb2, kernel_pb2, policy_pb2
from services.auth import Role

PROTO_MODULES = (kernel_pb2, gateway_pb2, cognition_pb2, policy_pb2, biography_pb2)


@dataclass(frozen=True)
class Rpc:
    """One RPC: `/pkg.Service/Method`, which Egbe service serves it, and the roles it admits."""

    method: MethodDescriptor
    egbe_service: str
    admitted: frozenset[Role]

    @property
    def path(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def request_class(self) -> Any:
        return GetMessageClass(self.method.input_type)

    @property
    def response_class(self) -> Any:
        return GetMessageClass(self.method.output_type)

    @property
    def shape(self) -> str:
        client = "stream" if self.method.client_streaming else "unary"
        server = "stream" if self.method.server_streaming else "unary"
        return f"{client}_{server}"

    def __str__(self) -> str:
        return f"{self.method.containing_service.name}.{self.method.name}"


def _method_roles() -> dict[str, tuple[str, dict[str, frozenset[Role]]]]:
    """gRPC service name -> (Egbe service name, method -> roles), from each package's servicer."""
    roles = {}
    for egbe_service, builder in BUNDLE_BUILDERS.items():
        package = builder.split(".")[0]
        servicer = importlib.import_module(f"{package}.servicer")
        for service_name, methods in servicer.METHOD_ROLES.items():
            roles[service_name] = (egbe_service, dict(methods))
    return roles


def all_rpcs() -> Iterator[Rpc]:
    roles = _method_roles()
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            egbe_service, methods = roles[service.full_name]
            for method in service.methods:
                yield Rpc(method, egbe_service, frozenset(methods[method.name]))


@dataclass(frozen=True)
class Outcome:
    """How a call ended: its status code, details, the error (for rich status) and what came back."""

    code: grpc.StatusCode
    details: str
    error: grpc.RpcError | None
    responses: int


def call(
    channel: grpc.Channel,
    rpc: Rpc,
    requests: list[Any],
    metadata: tuple[tuple[str, str], ...],
    timeout: float,
    *,
    serialize: Any = None,
) -> Outcome:
    """Make one call of any shape; a server stream is read to its first answer, then cancelled."""
    serializer = serialize or rpc.request_class.SerializeToString
    deserializer = rpc.response_class.FromString
    factory = getattr(channel, rpc.shape)
    stub = factory(rpc.path, request_serializer=serializer, response_deserializer=deserializer)
    responses = 0
    try:
        if rpc.shape == "unary_unary":
            stub(requests[0], metadata=metadata, timeout=timeout)
            responses = 1
        elif rpc.shape == "stream_unary":
            stub(iter(requests), metadata=metadata, timeout=timeout)
            responses = 1
        else:
            argument = requests[0] if rpc.shape == "unary_stream" else iter(requests)
            stream = stub(argument, metadata=metadata, timeout=timeout)
            for _ in stream:
                responses += 1
                if rpc.shape == "unary_stream":
                    stream.cancel()
                    break
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.CANCELLED and responses:  # type: ignore[attr-defined]
            return Outcome(grpc.StatusCode.OK, "", None, responses)
        return Outcome(error.code(), error.details() or "", error, responses)  # type: ignore[attr-defined]
    return Outcome(grpc.StatusCode.OK, "", None, responses)
