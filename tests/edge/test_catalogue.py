"""The edge serves what the services serve, read from the descriptors: every RPC a servicer declares,
at its route, dialled at the service that serves it, in its call shape; nothing withheld."""

from __future__ import annotations

import pytest

from edge.catalogue import build_catalogue
from tests.system.rpc_catalogue import all_rpcs


def test_every_declared_rpc_but_the_withheld_is_served_where_its_service_is() -> None:
    catalogue = build_catalogue(["OperatorService"])
    expected = {
        f"/v1/{rpc.method.containing_service.name}/{rpc.method.name}": rpc
        for rpc in all_rpcs()
        if rpc.method.containing_service.name != "OperatorService"
    }
    assert set(catalogue) == set(expected)
    for route, rpc in expected.items():
        served = catalogue[route]
        assert (served.grpc_path, served.process) == (rpc.path, rpc.egbe_service)
        assert (served.request, served.response) == (rpc.request_class, rpc.response_class)
        assert (served.client_streaming, served.server_streaming) == (
            rpc.method.client_streaming,
            rpc.method.server_streaming,
        )
    assert len(build_catalogue()) == len(list(all_rpcs()))


def test_withholding_a_service_the_protocol_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"names no egbe.v1 service: \['OperatorServise'\]"):
        build_catalogue(["OperatorServise"])
