"""A run's doors refuse before anything changes: an unknown output schema costs no model call, a call
naming another Ori or tier than its run's is PERMISSION_DENIED before any model or store, each kind of
request keeps its own request ids, and a stopped run's boundary names the control that stopped it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from egbe.v1 import action_pb2, cognition_pb2, cognition_pb2_grpc, common_pb2, gateway_pb2
from gateway.adapters.base import ModelRequest
from gateway.errors import RunStopped
from gateway.records import ControlKind, ControlScope
from gateway.runs import Who
from services.auth import Role
from services.errors import field_violations
from services.settings import Endpoint
from tests.gateway.harness import (
    CLOTHO,
    LACHESIS,
    GatewayHarness,
    admit_request,
    gateway_settings,
    generate_request,
    leased_gateway,
    start_gateway,
)


def _status(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    return status


def _error_info(status: status_pb2.Status) -> dict[str, str]:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return dict(info.metadata)
    return {}


def _ori(ori_id: str, tenant: str = "tenant-a", world: str = "world-1") -> common_pb2.OriRef:
    return common_pb2.OriRef(tenant_id=tenant, world_id=world, ori_id=ori_id)


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return refused.value


async def test_an_unknown_output_schema_is_refused_before_it_counts(gateway: GatewayHarness) -> None:
    run = await gateway.admit("ada")  # Clotho: two model calls
    metadata = gateway.metadata(Role.SERVICE)
    unknown = generate_request(run.run_id)
    unknown.output_schema = "egbe.cognition.nonsense.v1"
    for _ in range(2):
        error = await _refused(gateway.gateway.Generate(unknown, metadata=metadata))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in field_violations(_status(error))] == ["output_schema"]
    assert await gateway.audit_records() == []
    for n in (1, 2):  # both of the run's calls are still there
        assert (await gateway.generate(run.run_id)).call_id == f"{run.run_id}:{n}"
    assert len(await gateway.audit_records()) == 2


async def test_a_call_naming_another_ori_or_tier_is_refused_before_the_model(
    gateway: GatewayHarness,
) -> None:
    run = await gateway.admit("ada")
    metadata = gateway.metadata(Role.SERVICE)
    asked: list[tuple[str, common_pb2.OriRef | None, int]] = [
        ("ori", _ori("bram"), 0),
        ("ori", _ori("ada", world="world-2"), 0),
        ("tier", None, LACHESIS),
    ]
    for field, ori, tier in asked:
        request = generate_request(run.run_id)
        if ori is not None:
            request.ori.CopyFrom(ori)
        request.tier = tier  # type: ignore[assignment]
        error = await _refused(gateway.gateway.Generate(request, metadata=metadata))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert [v.field for v in field_violations(_status(error))] == [field]
    assert await gateway.audit_records() == []
    own = generate_request(run.run_id)
    own.ori.CopyFrom(_ori("ada"))
    own.tier = CLOTHO
    reply = await gateway.gateway.Generate(own, metadata=metadata)
    assert reply.call_id == f"{run.run_id}:1"  # the refusals counted no call
    assert (reply.ori, reply.tier) == (_ori("ada"), CLOTHO)
    unnamed = await gateway.generate(run.run_id)  # a call naming neither answers the run's own
    assert (unnamed.ori, unnamed.tier) == (_ori("ada"), CLOTHO)


async def test_a_fused_run_whose_call_names_another_ori_admits_nothing(gateway: GatewayHarness) -> None:
    metadata = gateway.metadata(Role.SERVICE)
    for field, value in (("ori", _ori("bram")), ("tier", LACHESIS)):
        request = gateway_pb2.RunRequest(admit=admit_request("ada"), generate=generate_request(""))
        if field == "ori":
            request.generate.ori.CopyFrom(value)  # type: ignore[arg-type]
        else:
            request.generate.tier = value  # type: ignore[assignment]
        error = await _refused(gateway.gateway.Run(request, metadata=metadata))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert [v.field for v in field_violations(_status(error))] == [f"generate.{field}"]
    spend = await gateway.spend("world-1")
    assert (spend.admissions, spend.reserved_tokens) == (0, 0)
    assert await gateway.audit_records() == []
    ran = await gateway.run("ada")
    assert (ran.generation.ori, ran.generation.tier) == (_ori("ada"), CLOTHO)


class _Cognition(cognition_pb2_grpc.CognitionServiceServicer):
    """A cognition service whose Think answers at once, recording the deadline each call carried."""

    def __init__(self) -> None:
        self.time_remaining: list[float | None] = []

    async def Think(self, request: cognition_pb2.ThinkRequest, context: Any) -> cognition_pb2.ThinkResponse:
        self.time_remaining.append(context.time_remaining())
        return cognition_pb2.ThinkResponse(policy_decision="v1:test:allowed")


@pytest.fixture
async def cognition() -> AsyncIterator[tuple[_Cognition, int]]:
    servicer = _Cognition()  # type: ignore[abstract]
    server = grpc.aio.server()
    cognition_pb2_grpc.add_CognitionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, port
    await server.stop(None)


async def _with_cognition(tmp_path: Path, database_url: str | None, port: int) -> GatewayHarness:
    settings = gateway_settings(tmp_path, database_url)
    endpoints = {**settings.endpoints, "cognition": Endpoint(port=port)}
    return await start_gateway(settings.model_copy(update={"endpoints": endpoints}))


def _submit(request_id: str) -> gateway_pb2.SubmitRequest:
    return gateway_pb2.SubmitRequest(
        request_id=request_id,
        candidate=action_pb2.CognitionCallCandidate(ori=_ori("ada"), tier=CLOTHO, cause=1),  # type: ignore[arg-type]
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
    )


async def test_submit_run_and_admit_keep_their_own_request_ids(
    tmp_path: Path, database_url: str | None, cognition: tuple[_Cognition, int]
) -> None:
    harness = await _with_cognition(tmp_path, database_url, cognition[1])
    try:
        metadata = harness.metadata(Role.SERVICE)
        submitted = await harness.gateway.Submit(_submit("req-1"), metadata=metadata)
        assert submitted.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
        ran = await harness.run("ada", request_id="req-1")
        assert ran.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
        assert ran.admission.run_id not in {"", submitted.run_id}
        admitted = await harness.gateway.AdmitRun(admit_request("ada", request_id="req-1"), metadata=metadata)
        assert admitted.admitted
        assert admitted.run_id not in {submitted.run_id, ran.admission.run_id}
        # and each repeat still answers its own first request
        again = await harness.gateway.Submit(_submit("req-1"), metadata=metadata)
        assert again.run_id == submitted.run_id
        assert (await harness.run("ada", request_id="req-1")) == ran
        repeat = admit_request("ada", request_id="req-1")
        assert (await harness.gateway.AdmitRun(repeat, metadata=metadata)).run_id == admitted.run_id
        assert len(cognition[0].time_remaining) == 1
    finally:
        await harness.stop()


async def test_submit_passes_its_callers_deadline_to_think(
    tmp_path: Path, cognition: tuple[_Cognition, int]
) -> None:
    harness = await _with_cognition(tmp_path, None, cognition[1])
    try:
        reply = await harness.gateway.Submit(
            _submit(""), metadata=harness.metadata(Role.SERVICE), timeout=5.0
        )
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
        [remaining] = cognition[0].time_remaining
        assert remaining is not None
        assert 0 < remaining <= 5.0  # not the run timeout (300 s)
    finally:
        await harness.stop()


async def test_a_model_boundary_names_the_control_that_stopped_the_run(gateway: GatewayHarness) -> None:
    run = await gateway.admit("ada")
    killed = await gateway.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada", reason="stop"), metadata=gateway.metadata(Role.OPERATOR)
    )
    error = await _refused(gateway.generate(run.run_id))
    assert error.code() == grpc.StatusCode.ABORTED
    info = _error_info(_status(error))
    assert info["control_id"] == killed.control.control_id
    assert str(error.details()).startswith("run stopped by operator control: kill ori 'ada'")
    assert await gateway.audit_records() == []


async def test_a_fused_run_stopped_after_its_admission_makes_no_call(
    tmp_path: Path, database_url: str | None
) -> None:
    """A control committed while the run's reservation is made stops it at its model boundary."""
    async with leased_gateway(tmp_path, database_url, cap=100_000, holder="a") as gateway:
        reserve = gateway.leases.reserve

        async def reserve_then_kill(*args: Any, **kwargs: Any) -> bool:
            reserved = await reserve(*args, **kwargs)
            await gateway.add_control(
                ControlKind.KILL, ControlScope.ORI, "ada", reason="stop", operator_id="ops"
            )
            return reserved

        gateway.leases.reserve = reserve_then_kill  # type: ignore[method-assign]
        request = ModelRequest("You are Ada.", "Objective: bake", mode="summary")
        with pytest.raises(RunStopped):
            await gateway.run_once(Who("t", "w", "ada"), CLOTHO, 1, request)
        audited = await gateway.store.list_audit(ori_id="", tier=0, run_id="", after_seq=0, limit=10)
        assert audited == []
