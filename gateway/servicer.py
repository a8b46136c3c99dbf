"""CognitionGatewayService over gRPC: each RPC checks its request and builds its answer through
`wire.py`, and calls the domain (`service.CognitionGateway`; a Submit's run is `submission.py`'s),
mapping its errors (`errors.status_error`).
The OperatorService is `operator_servicer.py`."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from gateway import wire
from gateway.budget import evaluate_budget, resolve_world_cap
from gateway.calls import GenerateResult
from gateway.cognition_client import CognitionClient
from gateway.errors import GatewayError, status_error
from gateway.records import RunEnd
from gateway.routing import model_ref
from gateway.runs import AdmitResult, Requester
from gateway.service import CognitionGateway
from gateway.streams import StreamRuns, serve_stream
from gateway.submission import Submissions
from services.auth import Role, require_scope
from services.errors import Aborted, InvalidArgument
from services.grpc_types import Context

_GATEWAY = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
_OPERATOR = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
_OPERATOR_ONLY = frozenset({Role.OPERATOR})
# The OperatorService reads a world server may make with the world role too; gateway/operator_servicer.py
# does not record them as operator attempts.
WORLD_READS = frozenset({"GetSpend", "ListControls", "ListWorlds"})

METHOD_ROLES = {
    _GATEWAY: {
        "Submit": frozenset({Role.SERVICE, Role.WORLD}),
        "Generate": frozenset({Role.SERVICE}),
        "EvaluateBudget": frozenset({Role.SERVICE, Role.WORLD, Role.OPERATOR}),
        "SelectModelRoute": frozenset({Role.SERVICE, Role.OPERATOR}),
        "AdmitRun": frozenset({Role.SERVICE}),
        "EndRun": frozenset({Role.SERVICE}),
        "CheckToolCall": frozenset({Role.SERVICE}),
        "Run": frozenset({Role.SERVICE}),
        "RunStream": frozenset({Role.SERVICE}),
        "AdmitStream": frozenset({Role.SERVICE}),
    },
    _OPERATOR: {
        method.name: frozenset({Role.OPERATOR, Role.WORLD}) if method.name in WORLD_READS else _OPERATOR_ONLY
        for method in gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].methods
    },
}


class CognitionGatewayServicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    def __init__(self, gateway: CognitionGateway, cognition: CognitionClient) -> None:
        self._gateway = gateway
        self._fingerprint = wire.fingerprint_message(gateway.fingerprint)
        self._known_routes = {model_ref(c.model_class) for c in gateway.config.routing.candidates}
        self._submissions = Submissions(gateway, cognition, self._fingerprint)

    async def Submit(
        self, request: gateway_pb2.SubmitRequest, context: Context
    ) -> gateway_pb2.SubmitResponse:
        who = wire.submit_request(request, self._known_routes)
        ori = request.candidate.ori
        require_scope(tenant=ori.tenant_id, world=ori.world_id, at="candidate.ori")
        try:
            return await self._submissions.submit(who, request, context.time_remaining())
        except GatewayError as error:
            raise status_error(error) from error

    async def Generate(
        self, request: gateway_pb2.GenerateRequest, context: Context
    ) -> gateway_pb2.GenerateResponse:
        wire.check_texts(wire.ID_CHARS * 2, run_id=request.run_id)
        model_request = wire.model_request(request, context.time_remaining())
        asked = wire.asked_ori(request)
        try:
            result = await self._gateway.generate(
                request.run_id,
                model_request,
                attempt=request.attempt or 1,
                asked=asked,
                asked_tier=request.tier,
            )
        except GatewayError as error:
            raise status_error(error) from error
        return wire.generate_response(result)

    async def Run(self, request: gateway_pb2.RunRequest, context: Context) -> gateway_pb2.RunResponse:
        admit, generate = request.admit, request.generate
        with wire.UNDER_ADMIT:
            who = wire.check_ori("", admit.ori)
            wire.check_texts(
                wire.ID_CHARS * 2, request_id=admit.request_id, kernel_call_id=admit.kernel_call_id
            )
        with wire.UNDER_GENERATE:
            if generate.run_id:
                raise InvalidArgument.field("run_id", "must be empty: Run admits the run itself")
            model_request = wire.model_request(generate, context.time_remaining())
            wire.check_fused_binding(who, admit.tier, generate)
        fingerprint = self._fingerprint

        def answer(admission: AdmitResult, call: GenerateResult, ended: RunEnd) -> str:
            """What a repeat of the request id answers: this run's response."""
            reply = wire.run_response(wire.admission_response(admission, fingerprint), call, ended)
            return base64.b64encode(reply.SerializeToString()).decode()

        # (admit.* names every field the admission refuses: ori, tier, cause)
        with wire.UNDER_ADMIT:
            try:
                fused = await self._gateway.run_once(
                    who,
                    admit.tier,
                    admit.cause,
                    model_request,
                    request_id=admit.request_id,
                    kernel_call_id=admit.kernel_call_id,
                    result_of=answer,
                )
            except GatewayError as error:
                raise status_error(error) from error
        admission = fused.admission
        if admission.stopped_by is not None:
            raise Aborted(admission.detail, metadata={"control_id": admission.stopped_by.control_id})
        if admission.repeated:
            earlier = wire.earlier_reply(admission.run.run_id, admit.request_id, admission.earlier_result)
            return gateway_pb2.RunResponse.FromString(earlier)
        if fused.deferred_by:
            return gateway_pb2.RunResponse(
                outcome=gateway_pb2.RUN_OUTCOME_DEFERRED_BY_RATE_LIMIT,
                admission=wire.admission_response(admission, fingerprint),
                detail=fused.deferred_by,
            )
        if fused.call is None or fused.ended is None:
            return gateway_pb2.RunResponse(
                outcome=gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP,
                admission=wire.admission_response(admission, fingerprint),
            )
        return wire.run_response(wire.admission_response(admission, fingerprint), fused.call, fused.ended)

    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Context
    ) -> gateway_pb2.EvaluateBudgetResponse:
        budget = self._gateway.config.budget
        cap = resolve_world_cap(budget, request.homestead_rest_bp, request.world_cap_tokens)
        return wire.budget_response(evaluate_budget(wire.token_requests(request), budget, cap))

    async def SelectModelRoute(
        self, request: gateway_pb2.SelectModelRouteRequest, context: Context
    ) -> gateway_pb2.SelectModelRouteResponse:
        route = self._gateway.routes.describe(request.tier)
        return wire.route_response(request.tier, route, self._fingerprint)

    async def _admit(self, request: gateway_pb2.AdmitRunRequest) -> AdmitResult:
        """An AdmitRun request checked and admitted; a control that refuses it is ABORTED."""
        who = wire.check_ori("", request.ori)
        wire.check_texts(
            wire.ID_CHARS * 2, request_id=request.request_id, kernel_call_id=request.kernel_call_id
        )
        try:
            admission = await self._gateway.admit(
                who,
                request.tier,
                request.cause,
                request_id=request.request_id,
                kernel_call_id=request.kernel_call_id,
                requester=Requester.ADMIT,
            )
        except GatewayError as error:
            raise status_error(error) from error
        if admission.stopped_by is not None:
            raise Aborted(admission.detail, metadata={"control_id": admission.stopped_by.control_id})
        return admission

    async def AdmitRun(
        self, request: gateway_pb2.AdmitRunRequest, context: Context
    ) -> gateway_pb2.AdmitRunResponse:
        return wire.admission_response(await self._admit(request), self._fingerprint)

    async def EndRun(
        self, request: gateway_pb2.EndRunRequest, context: Context
    ) -> gateway_pb2.EndRunResponse:
        status = wire.end_request(request)
        try:
            ended = await self._gateway.end_run(request.run_id, status, detail=request.detail)
        except GatewayError as error:
            raise status_error(error) from error
        return wire.end_response(ended)

    async def CheckToolCall(
        self, request: gateway_pb2.CheckToolCallRequest, context: Context
    ) -> gateway_pb2.CheckToolCallResponse:
        wire.check_texts(wire.ID_CHARS * 2, run_id=request.run_id, tool_name=request.tool_name)
        try:
            used, remaining = await self._gateway.check_tool_call(request.run_id, request.tool_name)
        except GatewayError as error:
            raise status_error(error) from error
        return gateway_pb2.CheckToolCallResponse(tool_calls_used=used, tool_calls_remaining=remaining)

    def RunStream(
        self, request_iterator: AsyncIterator[gateway_pb2.RunStreamRequest], context: Context
    ) -> AsyncIterator[gateway_pb2.RunStreamResponse]:
        """Each message served by `Run`; a cancelled or broken stream cancels its runs in flight."""

        async def answer(request: gateway_pb2.RunStreamRequest) -> gateway_pb2.RunStreamResponse:
            with wire.UNDER_RUN:
                ran = await self.Run(request.run, context)
            return gateway_pb2.RunStreamResponse(message_id=request.message_id, run=ran)

        return serve_stream(request_iterator, answer, gateway_pb2.RunStreamResponse, cancel_in_flight=True)

    def AdmitStream(
        self, request_iterator: AsyncIterator[gateway_pb2.AdmitStreamRequest], context: Context
    ) -> AsyncIterator[gateway_pb2.AdmitStreamResponse]:
        """Each message served by `AdmitRun` or `EndRun`; the runs the stream admitted and did not end
        are ended as cancelled when it ends (after its admissions and endings in flight are done: a
        store transaction cut short could leave a reservation nobody releases until the sweep)."""
        runs = StreamRuns(self._gateway)

        async def answer(request: gateway_pb2.AdmitStreamRequest) -> gateway_pb2.AdmitStreamResponse:
            kind = request.WhichOneof("kind")
            if kind == "admit":
                with wire.UNDER_ADMIT:
                    admission = await self._admit(request.admit)
                if admission.admitted and not admission.repeated:
                    runs.admitted(admission.run.run_id)
                reply = wire.admission_response(admission, self._fingerprint)
                return gateway_pb2.AdmitStreamResponse(message_id=request.message_id, admit=reply)
            if kind == "end":
                with wire.UNDER_END:
                    ended = await self.EndRun(request.end, context)
                runs.ended(request.end.run_id)
                return gateway_pb2.AdmitStreamResponse(message_id=request.message_id, end=ended)
            raise InvalidArgument.field("kind", "set admit or end")

        return serve_stream(
            request_iterator,
            answer,
            gateway_pb2.AdmitStreamResponse,
            cancel_in_flight=False,
            on_close=runs.end_all,
        )
