"""Every RPC in egbe-protocol is served by its service, with declared roles and a real servicer method."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from assembly.launcher import builder_for
from assembly.settings import load_settings
from egbe.v1 import biography_pb2, cognition_pb2, gateway_pb2, kernel_pb2, policy_pb2
from services.auth import Role, TokenStore
from services.settings import SERVICE_NAMES

PROTO_FILES = [kernel_pb2, gateway_pb2, cognition_pb2, policy_pb2, biography_pb2]


def _all_proto_services() -> dict[str, list[str]]:
    return {
        service.full_name: [m.name for m in service.methods]
        for module in PROTO_FILES
        for service in module.DESCRIPTOR.services_by_name.values()
    }


@pytest.fixture(scope="module")
async def bundles(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, object]]:
    tokens = TokenStore({role: [f"{role.value}-token-for-wiring-test"] for role in Role})
    settings = load_settings(data_dir=tmp_path_factory.mktemp("wiring"))
    built = {name: await builder_for(name)(settings, tokens) for name in SERVICE_NAMES}
    yield built
    for bundle in built.values():
        if bundle.close is not None:
            await bundle.close()


async def test_every_proto_service_belongs_to_exactly_one_bundle(bundles: dict[str, object]) -> None:
    owners: dict[str, list[str]] = {}
    for name, bundle in bundles.items():
        for service in bundle.method_roles:  # type: ignore[attr-defined]
            owners.setdefault(service, []).append(name)
    assert {s: len(o) for s, o in owners.items()} == dict.fromkeys(_all_proto_services(), 1)


async def test_every_rpc_declares_its_roles(bundles: dict[str, object]) -> None:
    for bundle in bundles.values():
        for service, roles in bundle.method_roles.items():  # type: ignore[attr-defined]
            assert sorted(roles) == sorted(_all_proto_services()[service]), service
            assert all(roles.values()), f"{service} has an RPC that admits nobody"


async def test_every_rpc_has_a_servicer_method_of_its_own(bundles: dict[str, object]) -> None:
    """The generated base answers a generic UNIMPLEMENTED; ours must override every method."""
    services = _all_proto_services()
    checked = 0
    for bundle in bundles.values():
        for _, servicer in bundle.servicers:  # type: ignore[attr-defined]
            base = next(c for c in type(servicer).__mro__ if c.__module__.startswith("egbe.v1."))
            service = next(s for s in services if s.rsplit(".", 1)[1] + "Servicer" == base.__name__)
            for method in services[service]:
                assert getattr(type(servicer), method) is not getattr(base, method), f"{service}/{method}"
                checked += 1
    assert checked == sum(len(m) for m in services.values())
