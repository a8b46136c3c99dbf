"""A Submit's run, from admission to ending: admitted, thought through the cognition service (a task a
pushed control cancels, bounded by the run timeout or the caller's own deadline, whichever is sooner),
and ended with its answer kept for repeats of the request id. Every way it ends (completed, fallback,
killed, timed out, failed, deferred by its providers' rate limits, the caller gone) ends the run,
releasing what it reserved but did not use."""

from __future__ import annotations

import asyncio
import base64

import grpc

from egbe.v1 import cognition_pb2, common_pb2, gateway_pb2
from gateway import wire
from gateway.cognition_client import CognitionClient
from gateway.errors import RunStopped
from gateway.records import RunSpec, RunStatus
from gateway.runs import Requester, Who
from gateway.service import CognitionGateway
from services import tracing
from services.logging import bind_context


class Submissions:
    """Runs Submit requests (checked by `wire.submit_request`) on one gateway and one cognition client."""

    def __init__(
        self, gateway: CognitionGateway, cognition: CognitionClient, fingerprint: common_pb2.ConfigFingerprint
    ) -> None:
        self._gateway = gateway
        self._cognition = cognition
        self._fingerprint = fingerprint

    async def submit(
        self, who: Who, request: gateway_pb2.SubmitRequest, time_remaining: float | None = None
    ) -> gateway_pb2.SubmitResponse:
        """The Submit's run; `time_remaining` is the caller's deadline in seconds from now (None: none),
        passed on to Think when it is sooner than the run timeout."""
        candidate = request.candidate
        bind_context(world=candidate.ori.world_id, ori=candidate.ori.ori_id, tick=candidate.tick)
        with tracing.span("gateway", "gateway.admission", {"egbe.call_id": candidate.call_id}) as span:
            admission = await self._gateway.admit(
                who,
                candidate.tier,
                candidate.cause,
                request_id=request.request_id,
                kernel_call_id=candidate.call_id,
                requester=Requester.SUBMIT,
            )
            if span is not None:
                span.set_attributes(
                    {"egbe.admitted": admission.admitted, "egbe.run_id": admission.run.run_id}
                )
        if admission.repeated:
            return gateway_pb2.SubmitResponse.FromString(
                wire.earlier_reply(admission.run.run_id, request.request_id, admission.earlier_result)
            )
        adapter = self._gateway.adapter
        # What answers: the offline adapter names itself, never the model it stands in for.
        answering = (
            adapter.name if adapter.offline else self._gateway.routes.describe(candidate.tier).model_ref
        )
        reply = wire.submit_reply(admission, answering, adapter.offline, self._fingerprint)
        if not admission.admitted:
            return reply
        spec = admission.run
        bind_context(run=spec.run_id)
        timeout = self._gateway.config.run_timeout_seconds
        if time_remaining is not None:
            timeout = max(0.0, min(timeout, time_remaining))
        status, detail, fallbacks = await self._think(spec, wire.think_request(request, spec), timeout, reply)
        tracked = self._gateway.inflight.runs.get(spec.run_id)
        if tracked is not None:
            reply.usage.CopyFrom(wire.usage_message(tracked.usage))
            reply.cost.CopyFrom(
                common_pb2.CostMicroUsd(micro_usd=tracked.micro_usd, estimated=tracked.cost_estimated)
            )
        reply.outcome = wire.SUBMIT_OUTCOMES.get(status, gateway_pb2.RUN_OUTCOME_FAILED)
        reply.detail = detail or "completed"
        with tracing.span(
            "gateway", "gateway.settlement", {"egbe.run_id": spec.run_id, "egbe.outcome": status.value}
        ):
            await self._gateway.end_run(
                spec.run_id,
                status,
                detail=detail,
                fallbacks=fallbacks,
                result=base64.b64encode(reply.SerializeToString()).decode(),
            )
        return reply

    async def _think(
        self,
        spec: RunSpec,
        think: cognition_pb2.ThinkRequest,
        deadline_seconds: float,
        reply: gateway_pb2.SubmitResponse,
    ) -> tuple[RunStatus, str, int]:
        """The run's Think through cognition, its result copied into `reply`: how the run ends, why
        (empty when it completed) and its validation fallbacks. A cancelled caller or an unexpected
        error ends the run here and propagates."""
        try:
            thought = await self._gateway.run_guarded(
                spec, self._cognition.think(think, deadline_seconds=deadline_seconds), deadline_seconds
            )
        except RunStopped as error:
            return RunStatus.KILLED, str(error), 0
        except TimeoutError:
            return RunStatus.TIMED_OUT, "the run passed its deadline", 0
        except grpc.aio.AioRpcError as error:
            tracked = self._gateway.inflight.runs.get(spec.run_id)
            if tracked is not None and tracked.deferred_by:  # its model call was never sent
                return RunStatus.DEFERRED, tracked.deferred_by, 0
            detail = f"cognition Think failed: {error.code().name}: {error.details()}"
            timed_out = error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            return (RunStatus.TIMED_OUT if timed_out else RunStatus.FAILED), detail, 0
        except asyncio.CancelledError:
            await asyncio.shield(
                self._gateway.end_run(spec.run_id, RunStatus.CANCELLED, detail="caller cancelled")
            )
            raise
        except BaseException as error:
            await asyncio.shield(self._gateway.end_run(spec.run_id, RunStatus.FAILED, detail=repr(error)))
            raise
        reply.actions.extend(thought.actions)
        reply.committed_event_ids.extend(thought.committed_event_ids)
        reply.policy_decision = thought.policy_decision
        if not thought.fell_back:
            return RunStatus.COMPLETED, "", 0
        # Why, as cognition's audit names it ("policy_rejected", "quality_blocked", …).
        reason = thought.audit.fields["outcome"].string_value or "unnamed"
        return RunStatus.FALLBACK, f"fell back: {reason}", thought.validation_fallbacks
