"""CognitionGatewayService over gRPC: validate, call the domain, map to messages (OperatorService is
gateway/operator_service.py)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import grpc

from egbe.v1 import cognition_pb2, common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.admission import AdmitResult, CognitionGateway, GenerateResult, Who
from gateway.budget import TokenRequest, evaluate_budget, resolve_world_cap
from gateway.cognition_client import CognitionClient
from gateway.cost import Usage
from gateway.moment_checks import check_moment, text_violations
from gateway.records import RunEnd, RunStatus
from gateway.routing import model_ref, select_route
from gateway.streams import StreamRuns, serve_stream
from services.auth import Role
from services.errors import Aborted, EgbeError, FieldViolation, InvalidArgument
from services.grpc_types import Context

_GATEWAY = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
_OPERATOR = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
_OPERATOR_ONLY = frozenset({Role.OPERATOR})
# The OperatorService reads a world server may make with the world role too; gateway/operator_service.py
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

_OUTCOME_STATUS = {
    gateway_pb2.RUN_OUTCOME_COMPLETED: RunStatus.COMPLETED,
    gateway_pb2.RUN_OUTCOME_FALLBACK: RunStatus.FALLBACK,
    gateway_pb2.RUN_OUTCOME_KILLED: RunStatus.KILLED,
    gateway_pb2.RUN_OUTCOME_FAILED: RunStatus.FAILED,
}
_ZONE_NAMES = {
    value.number: value.name.removeprefix("UNTRUSTED_ZONE_KIND_")
    for value in gateway_pb2.UntrustedZoneKind.DESCRIPTOR.values
    if value.number
}
_MODE_NAMES = {
    gateway_pb2.COGNITION_MODE_DIALOGUE: "dialogue",
    gateway_pb2.COGNITION_MODE_DECISION: "decision",
    gateway_pb2.COGNITION_MODE_REFLECTION: "reflection",
    gateway_pb2.COGNITION_MODE_SUMMARY: "summary",
}


def _usage_message(usage: Usage) -> common_pb2.TokenUsage:
    return common_pb2.TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def _earlier_reply(run_id: str, request_id: str, earlier_result: str) -> bytes:
    """A repeated request id answers the first run's result (serialized), or says that run is still
    going."""
    if not earlier_result:
        raise Aborted(
            f"request_id {request_id!r} is already running as run {run_id}",
            metadata={"run_id": run_id, "request_id": request_id},
        )
    return base64.b64decode(earlier_result)


ID_CHARS = 128
TEXT_CHARS = 1_000


def _refused_text(limit: int, value: str) -> bool:
    """Whether `check_texts` refuses this value."""
    return "\x00" in value or 0 < limit < len(value)


def check_texts(limit: int, **fields: str) -> None:
    """Refuse NUL characters (PostgreSQL text cannot hold them) and values over `limit` (0 = no limit).

    Field names use `__` for `.` so nested paths can be keyword arguments.
    """
    violations = [
        violation
        for name, value in fields.items()
        if _refused_text(limit, value)
        for violation in text_violations(name.replace("__", "."), value, limit)
    ]
    if violations:
        raise InvalidArgument(violations)


def _check_ori(prefix: str, ori: common_pb2.OriRef) -> Who:
    """The Ori a request names, checked (every admission names one: the names are made only to refuse)."""
    ids = {"tenant_id": ori.tenant_id, "world_id": ori.world_id, "ori_id": ori.ori_id}
    if any(_refused_text(ID_CHARS, text) for text in ids.values()):
        check_texts(ID_CHARS, **{f"{prefix}ori__{name}": text for name, text in ids.items()})
    return Who(**ids)


def _model_request(request: gateway_pb2.GenerateRequest) -> ModelRequest:
    """A Generate request's model call, validated (field names relative to the request)."""
    mode = _MODE_NAMES.get(request.mode, "")
    prompt = request.prompt
    check_texts(ID_CHARS * 2, request_id=request.request_id, output_schema=request.output_schema)
    grants, contents = tuple(prompt.tool_grants), [zone.content for zone in prompt.untrusted]
    if any("\x00" in text for text in (prompt.system_policy, prompt.task_instruction, *grants, *contents)):
        check_texts(  # (named only when one is refused: the names cost more than the scan)
            0,
            prompt__system_policy=prompt.system_policy,
            prompt__task_instruction=prompt.task_instruction,
            **{f"prompt__tool_grants[{i}]": grant for i, grant in enumerate(grants)},
            **{f"prompt__untrusted[{i}]__content": content for i, content in enumerate(contents)},
        )
    unknown_zones = [
        FieldViolation(f"prompt.untrusted[{i}].kind", "must name an untrusted zone kind")
        for i, zone in enumerate(prompt.untrusted)
        if zone.kind not in _ZONE_NAMES
    ]
    if unknown_zones:
        raise InvalidArgument(unknown_zones)
    if not mode and not request.output_schema:
        raise InvalidArgument.field("mode", "must name a cognition mode (or set output_schema)")
    return ModelRequest(
        system_policy=prompt.system_policy,
        task_instruction=prompt.task_instruction,
        tool_grants=grants,
        untrusted=tuple(
            UntrustedPart(_ZONE_NAMES[zone.kind], content)
            for zone, content in zip(prompt.untrusted, contents, strict=True)
        ),
        mode=mode,
        output_schema=request.output_schema,
        max_output_tokens=request.max_output_tokens,
        request_id=request.request_id,
    )


def _generate_response(result: GenerateResult) -> gateway_pb2.GenerateResponse:
    return gateway_pb2.GenerateResponse(
        text=result.reply.text,
        usage=_usage_message(result.reply.usage),
        cost=common_pb2.CostMicroUsd(micro_usd=result.micro_usd, estimated=result.cost_estimated),
        model_ref=result.model_ref,
        offline=result.reply.offline,
        call_id=result.call_id,
        provider_attempts=result.reply.provider_attempts,
        model_latency_us=result.model_latency_us,
    )


def admission_response(
    admission: AdmitResult, fingerprint: common_pb2.ConfigFingerprint
) -> gateway_pb2.AdmitRunResponse:
    spec = admission.run
    return gateway_pb2.AdmitRunResponse(
        run_id=spec.run_id if admission.admitted else "",
        admitted=admission.admitted,
        budget=gateway_pb2.RunBudget(
            max_model_calls=spec.max_model_calls,
            max_tool_calls=spec.max_tool_calls,
            max_tokens=spec.max_tokens,
        ),
        reserved_tokens=admission.reserved_tokens,
        config_fingerprint=fingerprint,
        detail=admission.detail,
    )


def _run_response(
    admission: gateway_pb2.AdmitRunResponse, call: GenerateResult, ended: RunEnd
) -> gateway_pb2.RunResponse:
    return gateway_pb2.RunResponse(
        outcome=gateway_pb2.RUN_OUTCOME_COMPLETED,
        admission=admission,
        generation=_generate_response(call),
        ending=gateway_pb2.EndRunResponse(
            used_tokens=ended.used_tokens, released_tokens=ended.released_tokens, ended_now=ended.ended_now
        ),
    )


class _FieldsUnder:
    """Field violations raised inside name their fields under `prefix` (a nested request message),
    whatever the refusal (INVALID_ARGUMENT, or NOT_FOUND naming the field that carried an unknown id).
    A class rather than a generator context manager: entered three times per streamed run, for less."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        if not isinstance(error, EgbeError) or not error.violations:
            return
        rooted = [FieldViolation(self._prefix + v.field, v.description) for v in error.violations]
        if isinstance(error, InvalidArgument):  # its message lists the fields too
            raise InvalidArgument(rooted) from None
        error.violations = rooted  # (and it goes on up)


_UNDER_ADMIT, _UNDER_GENERATE = _FieldsUnder("admit."), _FieldsUnder("generate.")
_UNDER_RUN, _UNDER_END = _FieldsUnder("run."), _FieldsUnder("end.")


class CognitionGatewayServicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    def __init__(self, gateway: CognitionGateway, cognition: CognitionClient) -> None:
        self._gateway = gateway
        self._cognition = cognition
        self._known_routes = {model_ref(c.model_class) for c in gateway.config.routing.candidates}

    def _fingerprint(self) -> common_pb2.ConfigFingerprint:
        return common_pb2.ConfigFingerprint(fnv1a64=self._gateway.fingerprint, scope="gateway")

    async def Submit(
        self, request: gateway_pb2.SubmitRequest, context: Context
    ) -> gateway_pb2.SubmitResponse:
        candidate = request.candidate
        who = _check_ori("candidate.", candidate.ori)
        check_texts(ID_CHARS * 2, request_id=request.request_id, candidate__call_id=candidate.call_id)
        check_texts(0, stimulus=request.stimulus, locale=request.locale)
        check_moment(candidate.moment, "candidate.moment.")
        if request.mode not in _MODE_NAMES:
            raise InvalidArgument.field("mode", "must name a cognition mode")
        if candidate.model_route and candidate.model_route not in self._known_routes:
            raise InvalidArgument.field(
                "candidate.model_route", f"unknown model alias; expected one of {sorted(self._known_routes)}"
            )
        admission = await self._gateway.admit(
            who,
            candidate.tier,
            candidate.cause,
            request_id=request.request_id,
            kernel_call_id=candidate.call_id,
        )
        if admission.repeated:
            return gateway_pb2.SubmitResponse.FromString(
                _earlier_reply(admission.run.run_id, request.request_id, admission.earlier_result)
            )
        adapter = self._gateway.adapter
        # What answers: the offline adapter names itself, never the model it stands in for.
        answering = (
            adapter.name
            if adapter.offline
            else select_route(self._gateway.config.routing, candidate.tier).model_ref
        )
        reply = gateway_pb2.SubmitResponse(
            run_id=admission.run.run_id,
            model_ref=answering,
            offline=adapter.offline,
            config_fingerprint=self._fingerprint(),
            reserved_tokens=admission.reserved_tokens,
            detail=admission.detail,
        )
        if not admission.admitted:
            reply.outcome = (
                gateway_pb2.RUN_OUTCOME_KILLED
                if admission.stopped_by is not None
                else gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP
            )
            return reply
        spec = admission.run
        think = cognition_pb2.ThinkRequest(
            run_id=spec.run_id,
            ori=candidate.ori,
            tier=candidate.tier,
            mode=request.mode,
            cause=candidate.cause,
            locale=request.locale,  # empty: cognition speaks the Ori's own locale
            stimulus=request.stimulus,
            moment=candidate.moment,
            world_tick=candidate.tick,
            needs_rehydration=candidate.needs_rehydration,
            max_model_calls=spec.max_model_calls,
            max_tool_calls=spec.max_tool_calls,
            max_tokens=spec.max_tokens,
        )
        status, detail = RunStatus.FAILED, ""
        try:
            thought = await self._gateway.run_guarded(
                spec, self._cognition.think(think, deadline_seconds=self._gateway.config.run_timeout_seconds)
            )
        except Aborted as error:
            status, detail = RunStatus.KILLED, error.message
        except TimeoutError:
            status, detail = RunStatus.TIMED_OUT, "the run passed its deadline"
        except grpc.aio.AioRpcError as error:
            detail = f"cognition Think failed: {error.code().name}: {error.details()}"
            if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                status = RunStatus.TIMED_OUT
        except asyncio.CancelledError:
            await asyncio.shield(
                self._gateway.end_run(spec.run_id, RunStatus.CANCELLED, detail="caller cancelled")
            )
            raise
        except BaseException as error:
            await asyncio.shield(self._gateway.end_run(spec.run_id, RunStatus.FAILED, detail=repr(error)))
            raise
        else:
            status = RunStatus.FALLBACK if thought.fell_back else RunStatus.COMPLETED
            reply.actions.extend(thought.actions)
            reply.committed_event_ids.extend(thought.committed_event_ids)
            reply.policy_decision = thought.policy_decision
        tracked = self._gateway.inflight.runs.get(spec.run_id)
        if tracked is not None:
            reply.usage.CopyFrom(_usage_message(tracked.usage))
            reply.cost.CopyFrom(
                common_pb2.CostMicroUsd(micro_usd=tracked.micro_usd, estimated=tracked.cost_estimated)
            )
        reply.outcome = {
            RunStatus.COMPLETED: gateway_pb2.RUN_OUTCOME_COMPLETED,
            RunStatus.FALLBACK: gateway_pb2.RUN_OUTCOME_FALLBACK,
            RunStatus.KILLED: gateway_pb2.RUN_OUTCOME_KILLED,
        }.get(status, gateway_pb2.RUN_OUTCOME_FAILED)
        reply.detail = detail or "completed"
        fallbacks = thought.validation_fallbacks if status is RunStatus.FALLBACK else 0
        await self._gateway.end_run(
            spec.run_id,
            status,
            detail=detail,
            fallbacks=fallbacks,
            result=base64.b64encode(reply.SerializeToString()).decode(),
        )
        return reply

    async def Generate(
        self, request: gateway_pb2.GenerateRequest, context: Context
    ) -> gateway_pb2.GenerateResponse:
        check_texts(ID_CHARS * 2, run_id=request.run_id)
        model_request = _model_request(request)
        result = await self._gateway.generate(request.run_id, model_request, attempt=request.attempt or 1)
        return _generate_response(result)

    async def Run(self, request: gateway_pb2.RunRequest, context: Context) -> gateway_pb2.RunResponse:
        admit, generate = request.admit, request.generate
        with _UNDER_ADMIT:
            who = _check_ori("", admit.ori)
            check_texts(ID_CHARS * 2, request_id=admit.request_id, kernel_call_id=admit.kernel_call_id)
        with _UNDER_GENERATE:
            if generate.run_id:
                raise InvalidArgument.field("run_id", "must be empty: Run admits the run itself")
            model_request = _model_request(generate)
        fingerprint = self._fingerprint()

        def answer(admission: AdmitResult, call: GenerateResult, ended: RunEnd) -> str:
            """What a repeat of the request id answers: this run's response."""
            reply = _run_response(admission_response(admission, fingerprint), call, ended)
            return base64.b64encode(reply.SerializeToString()).decode()

        # (admit.* names every field the admission refuses: ori, tier, cause)
        with _UNDER_ADMIT:
            fused = await self._gateway.run_once(
                who,
                admit.tier,
                admit.cause,
                model_request,
                request_id=admit.request_id,
                kernel_call_id=admit.kernel_call_id,
                result_of=answer,
            )
        admission = fused.admission
        if admission.stopped_by is not None:
            raise Aborted(admission.detail, metadata={"control_id": admission.stopped_by.control_id})
        if admission.repeated:
            earlier = _earlier_reply(admission.run.run_id, admit.request_id, admission.earlier_result)
            return gateway_pb2.RunResponse.FromString(earlier)
        if fused.call is None or fused.ended is None:
            return gateway_pb2.RunResponse(
                outcome=gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP,
                admission=admission_response(admission, fingerprint),
            )
        return _run_response(admission_response(admission, fingerprint), fused.call, fused.ended)

    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Context
    ) -> gateway_pb2.EvaluateBudgetResponse:
        budget = self._gateway.config.budget
        cap = resolve_world_cap(budget, request.homestead_rest_bp, request.world_cap_tokens)
        requests = [TokenRequest(r.ori_id, r.tier, r.requested_tokens) for r in request.requests]
        evaluation = evaluate_budget(requests, budget, cap)
        return gateway_pb2.EvaluateBudgetResponse(
            allocations=[
                gateway_pb2.BudgetAllocation(
                    ori_id=a.request.ori_id,
                    tier=a.request.tier,  # type: ignore[arg-type]
                    requested_tokens=a.request.requested_tokens,
                    tier_capped_tokens=a.tier_capped_tokens,
                    allowed_tokens=a.allowed_tokens,
                    deferred_tokens=a.deferred_tokens,
                    over_tier_budget=a.over_tier_budget,
                    blocked_by_world_cap=a.blocked_by_world_cap,
                )
                for a in evaluation.allocations
            ],
            world_cap_tokens=evaluation.world_cap_tokens,
            total_allowed_tokens=evaluation.total_allowed_tokens,
            total_deferred_tokens=evaluation.total_deferred_tokens,
            world_cap_held=evaluation.world_cap_held,
        )

    async def SelectModelRoute(
        self, request: gateway_pb2.SelectModelRouteRequest, context: Context
    ) -> gateway_pb2.SelectModelRouteResponse:
        route = select_route(self._gateway.config.routing, request.tier)
        return gateway_pb2.SelectModelRouteResponse(
            tier=request.tier,
            model_ref=route.model_ref,
            model_class=route.model_class,
            concrete_model_id=route.concrete_model_id,
            smallest_qualified=route.smallest_qualified,
            quality_bp=route.quality_bp,
            required_quality_bp=route.required_quality_bp,
            eval_suite=route.eval_suite,
            config_fingerprint=self._fingerprint(),
        )

    async def _admit(self, request: gateway_pb2.AdmitRunRequest) -> AdmitResult:
        """An AdmitRun request validated and admitted; a control that refuses it is ABORTED."""
        who = _check_ori("", request.ori)
        check_texts(ID_CHARS * 2, request_id=request.request_id, kernel_call_id=request.kernel_call_id)
        admission = await self._gateway.admit(
            who,
            request.tier,
            request.cause,
            request_id=request.request_id,
            kernel_call_id=request.kernel_call_id,
        )
        if admission.stopped_by is not None:
            raise Aborted(admission.detail, metadata={"control_id": admission.stopped_by.control_id})
        return admission

    async def AdmitRun(
        self, request: gateway_pb2.AdmitRunRequest, context: Context
    ) -> gateway_pb2.AdmitRunResponse:
        return admission_response(await self._admit(request), self._fingerprint())

    async def EndRun(
        self, request: gateway_pb2.EndRunRequest, context: Context
    ) -> gateway_pb2.EndRunResponse:
        status = _OUTCOME_STATUS.get(request.outcome)
        if status is None:
            raise InvalidArgument.field("outcome", "must be COMPLETED, FALLBACK, KILLED or FAILED")
        check_texts(ID_CHARS * 2, run_id=request.run_id)
        check_texts(TEXT_CHARS, detail=request.detail)
        ended = await self._gateway.end_run(request.run_id, status, detail=request.detail)
        return gateway_pb2.EndRunResponse(
            used_tokens=ended.used_tokens, released_tokens=ended.released_tokens, ended_now=ended.ended_now
        )

    async def CheckToolCall(
        self, request: gateway_pb2.CheckToolCallRequest, context: Context
    ) -> gateway_pb2.CheckToolCallResponse:
        check_texts(ID_CHARS * 2, run_id=request.run_id, tool_name=request.tool_name)
        used, remaining = await self._gateway.check_tool_call(request.run_id, request.tool_name)
        return gateway_pb2.CheckToolCallResponse(tool_calls_used=used, tool_calls_remaining=remaining)

    def RunStream(
        self, request_iterator: AsyncIterator[gateway_pb2.RunStreamRequest], context: Context
    ) -> AsyncIterator[gateway_pb2.RunStreamResponse]:
        """Each message served by `Run`; a cancelled or broken stream cancels its runs in flight."""

        async def answer(request: gateway_pb2.RunStreamRequest) -> gateway_pb2.RunStreamResponse:
            with _UNDER_RUN:
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
                with _UNDER_ADMIT:
                    admission = await self._admit(request.admit)
                if admission.admitted and not admission.repeated:
                    runs.admitted(admission.run.run_id)
                reply = admission_response(admission, self._fingerprint())
                return gateway_pb2.AdmitStreamResponse(message_id=request.message_id, admit=reply)
            if kind == "end":
                with _UNDER_END:
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
