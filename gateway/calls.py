"""Model calls inside a run: the tier's route, the adapter call (a task a pushed control can cancel),
its cost, and its audit record (written by the caller with the ledger update; a call that got no answer
is audited here)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.adapters.provider_router import provider_model_ref
from gateway.config import TIER_NAMES
from gateway.core import GatewayCore
from gateway.cost import Usage, billed_micro_usd, estimate_tokens, estimated_micro_usd, provider_price
from gateway.errors import CallDeferred, RunKilled, RunStopped
from gateway.inflight import InFlightRun, SchemaStats
from gateway.provider_errors import ProviderAttempt, ProviderError, ProviderErrorClass, to_gateway_error
from gateway.records import AuditEntry, CallGrant, RunSpec
from gateway.routing import ModelRoute
from services import tracing
from services.causes import CAUSE_LABELS
from services.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class GenerateResult:
    call_id: str
    reply: ModelReply
    model_ref: str
    micro_usd: int
    cost_estimated: bool
    model_latency_us: int  # the adapter's own time for the call (`AdapterTiming`)
    run: RunSpec  # the run the call was made in: its admitted Ori and tier


class AdapterTiming:
    """How long one adapter call took, timed inside the task that runs it (so not the hop to the task): what
    the model's answer cost, apart from the gateway's own work around it; kept when the call fails."""

    __slots__ = ("latency_us",)

    def __init__(self) -> None:
        self.latency_us = 0

    async def timed(self, call: Awaitable[ModelReply]) -> ModelReply:
        started = time.perf_counter_ns()
        try:
            return await call
        finally:
            self.latency_us = (time.perf_counter_ns() - started) // 1_000


def _answered(reply: ModelReply) -> dict[str, str | int]:
    """The model span's answer: tokens, and which provider and model answered (a class's route may
    have fallen back past the first)."""
    attributes: dict[str, str | int] = {
        "gen_ai.usage.input_tokens": reply.usage.input_tokens,
        "gen_ai.usage.output_tokens": reply.usage.output_tokens,
    }
    if reply.answered_by is not None:
        attributes["egbe.provider"] = reply.answered_by.provider
        attributes["gen_ai.response.model"] = reply.answered_by.model_id
    return attributes


class ModelCalls(GatewayCore):
    """Routing, calling and auditing one model call of a run."""

    def _routed(self, spec: RunSpec, request: ModelRequest) -> tuple[ModelRoute, ModelRequest]:
        """The tier's route, and the request completed with its model and the run's output bound."""
        route = self.routes.route(spec.tier)
        return route, ModelRequest(
            **{
                **vars(request),
                "model_class": route.model_class,
                "concrete_model_id": route.concrete_model_id,
                "deferrable": spec.tier == 3,
                "max_output_tokens": request.max_output_tokens or spec.max_tokens,
            }
        )

    async def _call(
        self, run: InFlightRun, route: ModelRoute, request: ModelRequest, grant: CallGrant, attempt: int
    ) -> tuple[GenerateResult, AuditEntry]:
        """The adapter call a boundary granted, and its audit record for the caller to write with the
        ledger update (a call that got no answer is audited here)."""
        spec, run_id = run.spec, run.spec.run_id
        request = ModelRequest(**{**vars(request), "max_output_tokens": grant.max_output_tokens})
        schema = run.schemas.setdefault(request.output_schema or request.mode, SchemaStats())
        schema.attempts += 1
        schema.calls += int(attempt <= 1)
        call_id = f"{run_id}:{grant.call_index}"
        model_ref = self.adapter.name if self.adapter.offline else route.model_ref

        def audit(tried: tuple[ProviderAttempt, ...], **outcome: Any) -> AuditEntry:
            """The call's record; `tried`: every provider of its class's route it was tried on."""
            context = _replay_context(request, attempt)
            if tried:
                context["providers_tried"] = [asdict(one) for one in tried]
            return AuditEntry(
                call_id=call_id,
                run_id=run_id,
                tenant_id=spec.tenant_id,
                world_id=spec.world_id,
                ori_id=spec.ori_id,
                tier=spec.tier,
                cause=CAUSE_LABELS[spec.cause],
                model_class=route.model_class,
                input_context=context,
                policy_decision=f"{self.config.safety_policy_id}:admitted",
                retention_policy_id=self.config.retention_policy_id,
                config_fingerprint=self.fingerprint,
                recorded_at_ms=self.now_ms(),
                kernel_call_id=spec.kernel_call_id,
                **outcome,
            )

        timing = AdapterTiming()
        system, _, model = model_ref.partition(":")
        try:
            with tracing.span(
                "gateway",
                f"chat {model}",
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": system,
                    "gen_ai.request.model": model,
                    "gen_ai.request.max_tokens": request.max_output_tokens,
                    "egbe.call_id": call_id,
                    "egbe.offline": self.adapter.offline,
                },
            ) as span:
                reply = await self._call_adapter(run, timing.timed(self.adapter.generate(request)))
                if span is not None:
                    span.set_attributes(_answered(reply))
        except BaseException as error:
            self._write_row(run)
            provider_error = provider_error_of(error)
            tried = provider_error.providers_tried if provider_error is not None else ()
            await self._record_failed_call(
                audit(
                    tried,
                    # With a providers table, the last provider the call was tried on.
                    model_ref=provider_model_ref(tried[-1], offline=False) if tried else model_ref,
                    offline=self.adapter.offline,
                    output="",
                    usage=Usage(),
                    micro_usd=0,
                    cost_estimated=self.adapter.offline,
                    error_class=failure_class(error),
                    model_latency_us=timing.latency_us,
                )
            )
            raise
        if reply.answered_by is not None:  # a provider of the table answered: name it
            model_ref = provider_model_ref(reply.answered_by, offline=reply.offline)
        cost = self.config.cost
        if reply.offline:
            micro_usd = estimated_micro_usd(cost, route.model_class, reply.usage.total)
        else:
            price = provider_price(self.config.providers, reply.answered_by)
            micro_usd = billed_micro_usd(
                cost, route.model_class, reply.usage, batched=reply.batched, price=price
            )
        # Offline replies, and usage a server did not report (the len/4 estimate), cost an estimate.
        estimated = reply.offline or reply.usage_estimated
        latency_us = timing.latency_us
        entry = audit(
            reply.providers_tried,
            model_ref=model_ref,
            offline=reply.offline,
            output=reply.text,
            usage=reply.usage,
            micro_usd=micro_usd,
            cost_estimated=estimated,
            model_latency_us=latency_us,
        )
        return GenerateResult(call_id, reply, model_ref, micro_usd, estimated, latency_us, spec), entry

    async def _call_adapter(self, run: InFlightRun, call: Coroutine[Any, Any, ModelReply]) -> ModelReply:
        """Run the adapter's call as a task a pushed control can cancel; provider errors become gateway
        errors (a call no provider had a turn for, `CallDeferred`)."""
        task: asyncio.Task[Any] = asyncio.create_task(call)
        run.tasks.add(task)
        try:
            reply: ModelReply = await task
        except asyncio.CancelledError:
            if run.stopped_by is not None and task.cancelled():
                raise RunStopped(run.stopped_by) from None
            task.cancel()
            raise
        except ProviderError as error:
            for fallback in error.providers_tried[:-1]:
                self._fell_back(run, fallback)
            if error.error_class is ProviderErrorClass.DEFERRED:  # never sent: no provider error met
                deferred = CallDeferred(
                    str(error),
                    provider=error.providers_tried[-1].provider if error.providers_tried else "",
                    retry_after_ms=round((error.retry_after_seconds or 0) * 1000),
                )
                run.deferred_by = str(deferred)
                raise deferred from error
            run.met(error.error_class.value)
            self.metrics.count(self.metrics.provider_errors, error.error_class.value)
            raise to_gateway_error(error) from error
        finally:
            run.tasks.discard(task)
        for fallback in reply.fallbacks:
            self._fell_back(run, fallback)
        for error_class in reply.retried_errors:
            run.met(error_class)
            self.metrics.count(self.metrics.provider_errors, error_class)
        return reply

    def _fell_back(self, run: InFlightRun, fallback: ProviderAttempt) -> None:
        """A provider that failed a call before the next of its route was tried: its error and the
        fallback, counted on the run (retry stats) and in the metrics."""
        run.met(fallback.error_class)
        run.fell_back(fallback.provider)
        self.metrics.count(self.metrics.provider_errors, fallback.error_class)
        self.metrics.count(self.metrics.provider_fallbacks, fallback.provider)

    async def _record_failed_call(self, entry: AuditEntry) -> None:
        """A call that got no answer is audited too, in the same transaction as its ledger update (zero
        tokens: the provider reports no usage for a failed request), so the ledger still equals the audit
        sum. Shielded: a cancelled or killed call still leaves its record."""
        try:
            charge = await asyncio.shield(self.store.record_call(entry, holder=self.leases.holder))
            self.leases.charge(charge)
        except Exception as exc:  # the store is down: the caller's own error is the one to report
            log.warning("failed model call not audited", call_id=entry.call_id, error=str(exc))

    def _account(self, run: InFlightRun, result: GenerateResult) -> None:
        """A recorded call's usage, on the run (for its answer and stats) and in the metrics."""
        usage = result.reply.usage
        run.add_usage(usage, result.micro_usd, estimated=result.cost_estimated)
        self.metrics.record_call(
            TIER_NAMES[run.spec.tier], result.model_ref, usage, result.micro_usd, result.model_latency_us
        )


def provider_error_of(error: BaseException) -> ProviderError | None:
    """The provider error that ended a call, itself or as the cause of the gateway error it became."""
    cause = error if isinstance(error, ProviderError) else error.__cause__
    return cause if isinstance(cause, ProviderError) else None


def failure_class(error: BaseException) -> str:
    """Why a model call got no answer: the provider error class, or what stopped the call."""
    if (provider_error := provider_error_of(error)) is not None:
        return provider_error.error_class.value
    if isinstance(error, RunStopped | RunKilled):
        return "killed"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "unknown"


def _replay_context(request: ModelRequest, attempt: int) -> dict[str, object]:
    """Everything needed to replay the call: every prompt part and the call's parameters."""
    return {
        "system_policy": request.system_policy,
        "tool_grants": list(request.tool_grants),
        "task_instruction": request.task_instruction,
        "untrusted": [{"kind": p.kind, "content": p.content} for p in request.untrusted],
        "mode": request.mode,
        "output_schema": request.output_schema,
        "max_output_tokens": request.max_output_tokens,
        "model_class": request.model_class,
        "concrete_model_id": request.concrete_model_id,
        "request_id": request.request_id,
        "attempt": attempt,
        "input_tokens_estimate": estimate_tokens(request.prompt_text()),
    }
