"""Every RPC the edge serves, read from the generated descriptors: a service added to a proto file, a
method added to a service or a field added to a message is served without code here."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

import egbe.v1
from services.errors import Unimplemented, clipped
from services.settings import SERVICE_NAMES


@dataclass(frozen=True)
class EdgeMethod:
    """One RPC as the edge serves it: a POST (unary) or a WebSocket (any stream) at `route`."""

    route: str  # "/v1/KernelService/StreamTicks"
    grpc_path: str  # "/egbe.v1.KernelService/StreamTicks"
    process: str  # the Egbe service that serves it ("kernel"), which names the target dialled
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def streams(self) -> bool:
        return self.client_streaming or self.server_streaming


def _protocol_services() -> Iterable[ServiceDescriptor]:
    """Every service of every generated `egbe.v1` module, in file order."""
    for module in pkgutil.iter_modules(egbe.v1.__path__):
        if module.name.endswith("_pb2"):
            descriptor = importlib.import_module(f"egbe.v1.{module.name}").DESCRIPTOR
            yield from descriptor.services_by_name.values()


def _process_of(service: ServiceDescriptor) -> str:
    """The Egbe service serving a gRPC service: its proto file is named for it (`kernel.proto`)."""
    process = PurePosixPath(service.file.name).stem
    if process not in SERVICE_NAMES:
        raise ValueError(f"{service.full_name} is in {service.file.name}, which no Egbe service serves")
    return process


def check_withheld(withheld: Iterable[str]) -> frozenset[str]:
    """The withheld services' short names, each a service of egbe.v1 (else ValueError naming it)."""
    names = frozenset(withheld)
    unknown = sorted(names - {s.name for s in _protocol_services()})
    if unknown:
        raise ValueError(f"edge.withheld_services names no egbe.v1 service: {unknown}")
    return names


def build_catalogue(withheld: Iterable[str] = ()) -> Mapping[str, EdgeMethod]:
    """The served RPCs by route, less the withheld services (short names; an unknown one is refused)."""
    withheld = check_withheld(withheld)
    services = list(_protocol_services())
    catalogue = {}
    for service in services:
        if service.name in withheld:
            continue
        process = _process_of(service)
        for method in service.methods:
            route = f"/v1/{service.name}/{method.name}"
            catalogue[route] = EdgeMethod(
                route=route,
                grpc_path=f"/{service.full_name}/{method.name}",
                process=process,
                request=message_factory.GetMessageClass(method.input_type),
                response=message_factory.GetMessageClass(method.output_type),
                client_streaming=method.client_streaming,
                server_streaming=method.server_streaming,
            )
    return catalogue


def unknown_route(path: str) -> Unimplemented:
    """What gRPC says of a method it does not serve, naming where the served ones live."""
    return Unimplemented(
        f"the edge serves no RPC at {clipped(path, 160)}; RPCs are at /v1/<Service>/<Method>"
    )
