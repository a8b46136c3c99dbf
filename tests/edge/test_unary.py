"""Unary RPCs as JSON POSTs through the edge, against a real `egbe up`: the same answers as gRPC's."""

from __future__ import annotations

import httpx
from google.protobuf import json_format

from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from services.auth import bearer_metadata
from tests.edge.conftest import AGENTS, GAME_ORIGIN, WORLD, EdgeEgbe


async def test_a_json_post_answers_what_grpc_answers(registered: EdgeEgbe) -> None:
    request = {"worldId": WORLD, "oriId": "ori-2"}
    async with httpx.AsyncClient(base_url=registered.http, timeout=30) as http:
        answer = await http.post(
            "/v1/KernelService/GetAgentState", json=request, headers=registered.bearer("world")
        )
    assert (answer.status_code, answer.headers["content-type"]) == (200, "application/json")
    async with registered.kernel_channel() as channel:
        direct = await kernel_pb2_grpc.KernelServiceStub(channel).GetAgentState(
            json_format.ParseDict(request, kernel_pb2.GetAgentStateRequest()),
            metadata=bearer_metadata(registered.tokens["world"]),
        )
    assert answer.json() == json_format.MessageToDict(direct)
    assert answer.json()["slot"] == 2
    assert answer.json()["ori"]["oriId"] == "ori-2"


async def test_a_binary_post_is_answered_in_binary(registered: EdgeEgbe) -> None:
    request = kernel_pb2.GetAgentStateRequest(world_id=WORLD, slot=AGENTS - 1)
    async with httpx.AsyncClient(base_url=registered.http, timeout=30) as http:
        answer = await http.post(
            "/v1/KernelService/GetAgentState",
            content=request.SerializeToString(),
            headers={**registered.bearer("world"), "Content-Type": "application/x-protobuf"},
        )
    assert (answer.status_code, answer.headers["content-type"]) == (200, "application/x-protobuf")
    state = kernel_pb2.GetAgentStateResponse.FromString(answer.content)
    assert (state.slot, state.ori.ori_id) == (AGENTS - 1, f"ori-{AGENTS - 1}")


async def test_registering_again_through_the_edge_keeps_the_slots(registered: EdgeEgbe) -> None:
    """A second registration of the same Ori (identities unchanged) returns their slots, as gRPC does."""
    again = {
        "worldId": WORLD,
        "agents": [{"ori": {"tenantId": "edge", "worldId": WORLD, "oriId": "ori-1"}}],
    }
    async with httpx.AsyncClient(base_url=registered.http, timeout=30) as http:
        answer = await http.post(
            "/v1/KernelService/RegisterAgents", json=again, headers=registered.bearer("world")
        )
    assert answer.json() == {"slots": [1], "registeredTotal": AGENTS}


async def test_the_edge_answers_its_health_probe(edge_egbe: EdgeEgbe) -> None:
    async with httpx.AsyncClient(base_url=edge_egbe.http, timeout=30) as http:
        answer = await http.get("/healthz")
    assert (answer.status_code, answer.json()) == (200, {"status": "SERVING"})


async def test_only_the_configured_web_origin_may_post_from_a_browser(edge_egbe: EdgeEgbe) -> None:
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    async with httpx.AsyncClient(base_url=edge_egbe.http, timeout=30) as http:
        allowed = await http.options("/v1/KernelService/Tick", headers={"Origin": GAME_ORIGIN, **asked})
        other = await http.options(
            "/v1/KernelService/Tick", headers={"Origin": "https://elsewhere.example", **asked}
        )
    assert (allowed.status_code, allowed.headers["access-control-allow-origin"]) == (200, GAME_ORIGIN)
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
