"""Every mapping between the CognitionGatewayService's messages and the gateway's domain: requests
checked (INVALID_ARGUMENT naming each bad field) and turned into domain values, results into responses.
The OperatorService's are in `operator_wire.py`."""

from __future__ import annotations

import base64
import time

from egbe.v1 import cognition_pb2, common_pb2, gateway_pb2
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import REPLY_SCHEMAS
from gateway.budget import BudgetEvaluation, TokenRequest
from gateway.calls import GenerateResult
from gateway.cost import Usage
from gateway.errors import GatewayError, status_error
from gateway.moment_checks import check_moment, text_violations
from gateway.records import RunEnd, RunSpec, RunStatus
from gateway.routing import ModelRoute
from gateway.runs import AdmitResult, Who, check_bound
from services.errors import Aborted, EgbeError, FieldViolation, InvalidArgument

OUTCOME_STATUS = {
    gateway_pb2.RUN_OUTCOME_COMPLETED: RunStatus.COMPLETED,
    gateway_pb2.RUN_OUTCOME_FALLBACK: RunStatus.FALLBACK,
    gateway_pb2.RUN_OUTCOME_KILLED: RunStatus.KILLED,
    gateway_pb2.RUN_OUTCOME_FAILED: RunStatus.FAILED,
    gateway_pb2.RUN_OUTCOME_DEFERRED_BY_RATE_LIMIT: RunStatus.DEFERRED,
}
_ZONE_NAMES = {
    value.number: value.name.removeprefix("UNTRUSTED_ZONE_KIND_")
    for value in gateway_pb2.UntrustedZoneKind.DESCRIPTOR.values
    if value.number
}
MODE_NAMES = {
    gateway_pb2.COGNITION_MODE_DIALOGUE: "dialogue",
    gateway_pb2.COGNITION_MODE_DECISION: "decision",
    gateway_pb2.COGNITION_MODE_REFLECTION: "reflection",
    gateway_pb2.COGNITION_MODE_SUMMARY: "summary",
}


def usage_message(usage: Usage) -> common_pb2.TokenUsage:
    return common_pb2.TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def earlier_reply(run_id: str, request_id: str, earlier_result: str) -> bytes:
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


def check_ori(prefix: str, ori: common_pb2.OriRef) -> Who:
    """The Ori a request names, checked (every admission names one: the names are made only to refuse)."""
    ids = {"tenant_id": ori.tenant_id, "world_id": ori.world_id, "ori_id": ori.ori_id}
    if any(_refused_text(ID_CHARS, text) for text in ids.values()):
        check_texts(ID_CHARS, **{f"{prefix}ori__{name}": text for name, text in ids.items()})
    return Who(**ids)


def model_request(request: gateway_pb2.GenerateRequest, time_remaining: float | None = None) -> ModelRequest:
    """A Generate request's model call, validated whole before anything is counted (field names relative
    to the request); `time_remaining` is the caller's deadline in seconds from now (None: none)."""
    mode = MODE_NAMES.get(request.mode, "")
    prompt = request.prompt
    check_texts(ID_CHARS * 2, request_id=request.request_id, output_schema=request.output_schema)
    if request.output_schema and request.output_schema not in REPLY_SCHEMAS:
        raise InvalidArgument.field(
            "output_schema", f"unknown schema; expected one of {', '.join(sorted(REPLY_SCHEMAS))}"
        )
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
        deadline=None if time_remaining is None else time.monotonic() + time_remaining,
    )


def asked_ori(request: gateway_pb2.GenerateRequest) -> Who | None:
    """The Ori a Generate request names (None when it names none)."""
    return check_ori("", request.ori) if request.HasField("ori") else None


def check_fused_binding(who: Who, tier: int, generate: gateway_pb2.GenerateRequest) -> None:
    """A Run's model call that names an Ori or a tier names the ones it admits (PERMISSION_DENIED naming
    `ori` or `tier`, relative to the call)."""
    try:
        check_bound(who, tier, asked_ori(generate), generate.tier)
    except GatewayError as error:
        raise status_error(error) from error


def generate_response(result: GenerateResult) -> gateway_pb2.GenerateResponse:
    """A model call's answer, naming the run's admitted Ori and tier (the caller checks they are its own)."""
    run = result.run
    return gateway_pb2.GenerateResponse(
        text=result.reply.text,
        usage=usage_message(result.reply.usage),
        cost=common_pb2.CostMicroUsd(micro_usd=result.micro_usd, estimated=result.cost_estimated),
        model_ref=result.model_ref,
        offline=result.reply.offline,
        call_id=result.call_id,
        provider_attempts=result.reply.provider_attempts,
        model_latency_us=result.model_latency_us,
        ori=common_pb2.OriRef(tenant_id=run.tenant_id, world_id=run.world_id, ori_id=run.ori_id),
        tier=run.tier,  # type: ignore[arg-type]
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


def run_response(
    admission: gateway_pb2.AdmitRunResponse, call: GenerateResult, ended: RunEnd
) -> gateway_pb2.RunResponse:
    return gateway_pb2.RunResponse(
        outcome=gateway_pb2.RUN_OUTCOME_COMPLETED,
        admission=admission,
        generation=generate_response(call),
        ending=end_response(ended),
    )


class FieldsUnder:
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


UNDER_ADMIT, UNDER_GENERATE = FieldsUnder("admit."), FieldsUnder("generate.")
UNDER_RUN, UNDER_END = FieldsUnder("run."), FieldsUnder("end.")


def fingerprint_message(fnv1a64: str) -> common_pb2.ConfigFingerprint:
    return common_pb2.ConfigFingerprint(fnv1a64=fnv1a64, scope="gateway")


def token_requests(request: gateway_pb2.EvaluateBudgetRequest) -> list[TokenRequest]:
    return [TokenRequest(r.ori_id, r.tier, r.requested_tokens) for r in request.requests]


def budget_response(evaluation: BudgetEvaluation) -> gateway_pb2.EvaluateBudgetResponse:
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


def route_response(
    tier: int, route: ModelRoute, fingerprint: common_pb2.ConfigFingerprint
) -> gateway_pb2.SelectModelRouteResponse:
    return gateway_pb2.SelectModelRouteResponse(
        tier=tier,  # type: ignore[arg-type]
        model_ref=route.model_ref,
        model_class=route.model_class,
        concrete_model_id=route.concrete_model_id,
        smallest_qualified=route.smallest_qualified,
        quality_bp=route.quality_bp,
        required_quality_bp=route.required_quality_bp,
        eval_suite=route.eval_suite,
        config_fingerprint=fingerprint,
        evaluated=route.evaluated,
        quality_note=route.note,
    )


def end_response(ended: RunEnd) -> gateway_pb2.EndRunResponse:
    return gateway_pb2.EndRunResponse(
        used_tokens=ended.used_tokens, released_tokens=ended.released_tokens, ended_now=ended.ended_now
    )


def end_request(request: gateway_pb2.EndRunRequest) -> RunStatus:
    """An EndRun request checked: the ending its outcome names."""
    status = OUTCOME_STATUS.get(request.outcome)
    if status is None:
        raise InvalidArgument.field(
            "outcome", "must be COMPLETED, FALLBACK, KILLED, FAILED or DEFERRED_BY_RATE_LIMIT"
        )
    check_texts(ID_CHARS * 2, run_id=request.run_id)
    check_texts(TEXT_CHARS, detail=request.detail)
    return status


def submit_request(request: gateway_pb2.SubmitRequest, known_routes: set[str]) -> Who:
    """A Submit request checked whole before anything is admitted: the Ori it names."""
    candidate = request.candidate
    who = check_ori("candidate.", candidate.ori)
    check_texts(ID_CHARS * 2, request_id=request.request_id, candidate__call_id=candidate.call_id)
    check_texts(0, stimulus=request.stimulus, locale=request.locale)
    check_moment(candidate.moment, "candidate.moment.")
    if request.mode not in MODE_NAMES:
        raise InvalidArgument.field("mode", "must name a cognition mode")
    if candidate.model_route and candidate.model_route not in known_routes:
        raise InvalidArgument.field(
            "candidate.model_route", f"unknown model alias; expected one of {sorted(known_routes)}"
        )
    return who


def submit_reply(
    admission: AdmitResult, answering: str, offline: bool, fingerprint: common_pb2.ConfigFingerprint
) -> gateway_pb2.SubmitResponse:
    """A Submit's answer as its admission leaves it (a refused run's outcome set: killed or deferred)."""
    reply = gateway_pb2.SubmitResponse(
        run_id=admission.run.run_id,
        model_ref=answering,
        offline=offline,
        config_fingerprint=fingerprint,
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


def think_request(request: gateway_pb2.SubmitRequest, spec: RunSpec) -> cognition_pb2.ThinkRequest:
    """The cognition service's Think for a Submit's admitted run: the candidate's moment, the caller's
    locale (empty: cognition speaks the Ori's own) and the run's budget."""
    return cognition_pb2.ThinkRequest(
        run_id=spec.run_id,
        ori=request.candidate.ori,
        tier=request.candidate.tier,
        mode=request.mode,
        cause=request.candidate.cause,
        locale=request.locale,  # empty: cognition speaks the Ori's own locale
        stimulus=request.stimulus,
        moment=request.candidate.moment,
        world_tick=request.candidate.tick,
        needs_rehydration=request.candidate.needs_rehydration,
        max_model_calls=spec.max_model_calls,
        max_tool_calls=spec.max_tool_calls,
        max_tokens=spec.max_tokens,
    )


# A Submit's outcome by how its run ended (any other ending is FAILED): EndRun's outcomes turned round.
SUBMIT_OUTCOMES = {status: outcome for outcome, status in OUTCOME_STATUS.items()}
