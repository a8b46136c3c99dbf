"""Bad input at the edge, over real sockets: the same google.rpc.Status a gRPC client gets, as JSON, and
nothing of a refused request applied."""

from __future__ import annotations

import json
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from grpc_status import rpc_status
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from services.auth import bearer_metadata
from tests.edge.conftest import (
    AGENTS,
    FIRST_FRAME_TIMEOUT,
    FRAME_LIMIT,
    WORLD,
    EdgeEgbe,
    batch_json,
    next_ticks,
    registration_json,
)

STREAM = "/v1/KernelService/StreamTicks"
REGISTER = "/v1/KernelService/RegisterAgents"


def grpc_status_document(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """What a gRPC client reads from a refusal: the google.rpc.Status in its trailers, as JSON."""
    status = rpc_status.from_call(error)
    assert status is not None
    return json_format.MessageToDict(status)


async def grpc_register(edge: EdgeEgbe, token: str, request: dict[str, Any]) -> dict[str, Any]:
    async with edge.kernel_channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kernel_pb2_grpc.KernelServiceStub(channel).RegisterAgents(
                json_format.ParseDict(request, kernel_pb2.RegisterAgentsRequest()),
                metadata=bearer_metadata(token),
            )
    return grpc_status_document(refused.value)


async def post(edge: EdgeEgbe, path: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=edge.http, timeout=30) as http:
        return await http.post(path, headers=headers, **body)


async def refusal(socket: ClientConnection) -> tuple[dict[str, Any], int]:
    """The error frame that ends a stream, and the close code after it."""
    frame = json.loads(await socket.recv())
    with pytest.raises(ConnectionClosed) as closed:
        await socket.recv()
    assert closed.value.rcvd is not None
    return frame["error"], closed.value.rcvd.code


def violations(status: dict[str, Any]) -> list[dict[str, str]]:
    return [v for d in status.get("details", []) for v in d.get("fieldViolations", [])]


async def test_a_wrong_token_gets_grpcs_status_over_post_and_websocket(registered: EdgeEgbe) -> None:
    wrong = "an-unknown-token-of-some-length"
    expected = await grpc_register(registered, wrong, registration_json(1))
    assert expected["code"] == grpc.StatusCode.UNAUTHENTICATED.value[0]
    answer = await post(registered, REGISTER, {"Authorization": f"Bearer {wrong}"}, json=registration_json(1))
    assert (answer.status_code, answer.json()) == (401, expected)
    async with connect(registered.ws + STREAM, additional_headers={"Authorization": f"Bearer {wrong}"}) as ws:
        await ws.send(json.dumps(batch_json(next_ticks(1)[0], AGENTS)))
        assert await refusal(ws) == (expected, 4000 + expected["code"])


async def test_a_missing_first_frame_token_is_refused_before_anything_is_forwarded(
    registered: EdgeEgbe,
) -> None:
    async with connect(registered.ws + STREAM) as socket:
        await socket.send(json.dumps(batch_json(next_ticks(1)[0], AGENTS)))
        status, code = await refusal(socket)
    assert (status["code"], code) == (16, 4016)
    assert status["message"].startswith('the first frame must be {"authorization": "Bearer <token>"}')


async def test_a_socket_that_never_names_its_token_is_refused_in_time(registered: EdgeEgbe) -> None:
    async with connect(registered.ws + STREAM) as socket:
        status, code = await refusal(socket)
    assert (status["code"], code) == (16, 4016)
    assert status["message"].startswith(f"no authorization within {FIRST_FRAME_TIMEOUT:g} s")


async def test_any_stream_rpc_is_a_socket_and_its_role_refusal_passes_through(registered: EdgeEgbe) -> None:
    """BiographyService/Subscribe (a server stream) admits services only: a world token is refused by
    the biography itself, as over gRPC."""
    async with connect(registered.ws + "/v1/BiographyService/Subscribe") as socket:
        await socket.send(json.dumps({"authorization": f"Bearer {registered.tokens['world']}"}))
        await socket.send(json.dumps({"oriIds": ["ori-0"]}))
        status, code = await refusal(socket)
    assert (status["code"], code) == (7, 4007)
    assert status["message"] == (
        "role 'world' may not call /egbe.v1.BiographyService/Subscribe (admits: operator, service)"
    )


async def test_a_scoped_tokens_refusal_passes_through_unchanged(registered: EdgeEgbe) -> None:
    """The token may act only in worlds "elsewhere-*": the kernel refuses it, naming the field."""
    expected = await grpc_register(registered, registered.tokens["scoped"], registration_json(1))
    assert expected["code"] == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert [v["field"] for v in violations(expected)] == ["world_id"]
    answer = await post(registered, REGISTER, registered.bearer("scoped"), json=registration_json(1))
    assert (answer.status_code, answer.json()) == (403, expected)
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("scoped")) as socket:
        await socket.send(json.dumps(batch_json(next_ticks(1)[0], AGENTS)))
        status, code = await refusal(socket)
    assert (status["code"], code) == (7, 4007)
    assert [v["field"] for v in violations(status)] == ["batch.world_id"]


async def test_malformed_json_and_an_unknown_field_name_the_field(registered: EdgeEgbe) -> None:
    malformed = await post(registered, REGISTER, registered.bearer("world"), content=b'{"worldId": ')
    assert malformed.status_code == 400
    assert malformed.json()["code"] == 3
    [violation] = violations(malformed.json())
    assert violation["field"] == "request"
    assert violation["description"].startswith("is not valid JSON: Expecting value")
    unknown = registration_json(1)
    unknown["agents"][0]["ori"]["nickname"] = "Ada"  # type: ignore[index]
    answer = await post(registered, REGISTER, registered.bearer("world"), json=unknown)
    assert answer.status_code == 400
    assert violations(answer.json()) == [
        {
            "field": "agents[0].ori.nickname",
            "description": "is not a field of this message (unknown field 'nickname')",
        }
    ]
    assert answer.json()["details"][-1] == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "INVALID_ARGUMENT",
        "domain": "egbe.dev",
    }


async def test_a_bad_frame_mid_stream_is_refused_and_not_applied(registered: EdgeEgbe) -> None:
    """The frames before it are answered; the refused tick is free to send again afterwards."""
    before, refused = next_ticks(2)
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        await socket.send(json.dumps(batch_json(before, AGENTS)))
        bad = batch_json(refused, AGENTS)
        bad["batch"]["frames"][0]["mood"] = "sunny"  # type: ignore[index]
        await socket.send(json.dumps(bad))
        assert int(json.loads(await socket.recv())["result"]["actions"]["tick"]) == before
        status, code = await refusal(socket)
    assert (status["code"], code) == (3, 4003)
    assert [v["field"] for v in violations(status)] == ["batch.frames[0].mood"]
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        await socket.send(json.dumps(batch_json(refused, AGENTS)))
        assert int(json.loads(await socket.recv())["result"]["actions"]["tick"]) == refused


async def test_a_kernel_refusal_is_grpcs_status(registered: EdgeEgbe) -> None:
    """A tick that goes backwards: the kernel's own refusal, the same over the edge as over gRPC."""
    tick, backwards = next_ticks(1)[0], 1
    async with registered.kernel_channel() as channel:
        call = kernel_pb2_grpc.KernelServiceStub(channel).StreamTicks(
            metadata=bearer_metadata(registered.tokens["world"])
        )
        await call.write(
            kernel_pb2.StreamTicksRequest(
                batch=json_format.ParseDict(
                    batch_json(tick, AGENTS)["batch"], kernel_pb2.StreamTicksRequest().batch
                )
            )
        )
        await call.read()
        await call.write(kernel_pb2.StreamTicksRequest(batch={"world_id": WORLD, "tick": backwards}))
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call.read()
    expected = grpc_status_document(failed.value)
    assert [v["field"] for v in violations(expected)] == ["batch.tick"]
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        await socket.send(json.dumps({"batch": {"worldId": WORLD, "tick": str(backwards)}}))
        assert await refusal(socket) == (expected, 4003)


async def test_a_frame_or_body_over_the_limit_is_refused_unforwarded(registered: EdgeEgbe) -> None:
    padded = batch_json(next_ticks(1)[0], AGENTS, situations=[{"slot": 0, "place": "x" * FRAME_LIMIT}])
    expected = {
        "code": 8,
        "message": "",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RESOURCE_EXHAUSTED",
                "domain": "egbe.dev",
                "metadata": {"limit": str(FRAME_LIMIT)},
            }
        ],
    }
    answer = await post(registered, "/v1/KernelService/Tick", registered.bearer("world"), json=padded)
    assert answer.status_code == 429
    assert answer.json() | {"message": ""} == expected
    assert f"limit of {FRAME_LIMIT} bytes" in answer.json()["message"]
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        await socket.send(json.dumps(padded))
        status, code = await refusal(socket)
    assert (status | {"message": ""}, code) == (expected, 4008)
    assert status["message"].startswith("frame 0 has ")
    # Far over the limit, the frame is not read at all.
    async with connect(
        registered.ws + STREAM, additional_headers=registered.bearer("world"), max_size=None
    ) as socket:
        await socket.send(b"\x00" * (FRAME_LIMIT * 2 + 1))
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    # Nothing reached the kernel: the padded tick is still free.
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        await socket.send(json.dumps(batch_json(int(padded["batch"]["tick"]), AGENTS)))  # type: ignore[index]
        assert json.loads(await socket.recv())["result"]["actions"]["tick"] == padded["batch"]["tick"]  # type: ignore[index]


async def test_an_rpc_the_edge_does_not_serve_is_unimplemented(registered: EdgeEgbe) -> None:
    operator = await post(
        registered, "/v1/OperatorService/ListControls", registered.bearer("operator"), json={}
    )
    assert (operator.status_code, operator.json()["code"]) == (501, 12)
    stream = await post(registered, STREAM, registered.bearer("world"), json={})
    assert (stream.status_code, violations(stream.json())[0]["field"]) == (400, "request")
