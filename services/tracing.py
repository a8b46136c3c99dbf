"""Traces: one per cognition call across every service, exported by OTLP when an endpoint is set.

The kernel's dispatcher starts a cognition call's trace (sampled at `trace_sample_ratio`); the W3C
`traceparent` travels in gRPC metadata, put there by the client interceptors `open_channel` adds
and read by the chassis, which opens a server span around every handler; a world server may start
the trace itself by sending a `traceparent`. Services add spans of their own (the gateway's
admission, model call and settlement; cognition's stages) with `tracer(service)`.

With no endpoint (`EGBE_OTEL_ENDPOINT`, else the standard `OTEL_EXPORTER_OTLP_ENDPOINT`) tracing is
off: no provider exists, `tracer` answers None, the chassis adds no span, channels no interceptor.
Each service has a provider of its own, so `egbe up` (every service in one process) still reports
each span under its own `service.name`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

SERVICE_NAME_PREFIX = "egbe-"
_NO_SPAN: AbstractContextManager[None] = nullcontext()


class _Tracing:
    """The exporter every service's provider sends to, and the providers made so far."""

    def __init__(self) -> None:
        self.exporter: SpanExporter | None = None
        self.batched = True
        self.ratio = 1.0
        self.providers: dict[str, TracerProvider] = {}


_state = _Tracing()


def install_exporter(exporter: SpanExporter | None, *, ratio: float = 1.0, batched: bool = True) -> None:
    """Send every service's spans to `exporter` (None: tracing off), keeping a root trace with
    probability `ratio`; `batched=False` exports each span as it ends (tests read them at once)."""
    for provider in _state.providers.values():
        provider.shutdown()
    _state.providers.clear()
    _state.exporter, _state.ratio, _state.batched = exporter, ratio, batched


def configure(endpoint: str | None, ratio: float) -> None:
    """Export by OTLP/gRPC to `endpoint` (else `OTEL_EXPORTER_OTLP_ENDPOINT`); with neither, trace
    nothing."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if endpoint is None:
        return  # (an exporter a test installed stays)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    install_exporter(OTLPSpanExporter(endpoint=endpoint), ratio=ratio)


def enabled() -> bool:
    return _state.exporter is not None


def tracer(service: str) -> trace.Tracer | None:
    """The tracer of one service (its spans carry `service.name` egbe-<service>), None when off."""
    if _state.exporter is None:
        return None
    provider = _state.providers.get(service)
    if provider is None:
        provider = TracerProvider(
            resource=Resource.create({"service.name": f"{SERVICE_NAME_PREFIX}{service}"}),
            sampler=ParentBased(TraceIdRatioBased(_state.ratio)),
        )
        processor: SpanProcessor = (
            BatchSpanProcessor(_state.exporter) if _state.batched else SimpleSpanProcessor(_state.exporter)
        )
        provider.add_span_processor(processor)
        _state.providers[service] = provider
    return provider.get_tracer("egbe")


def flush() -> None:
    """Export every finished span now (before a process exits, or a test reads them)."""
    for provider in _state.providers.values():
        provider.force_flush()


def server_span(
    service: str, method: str, metadata: Iterable[tuple[str, Any]] | None
) -> AbstractContextManager[Any]:
    """The span around one handler of `service`, the child of the caller's `traceparent` if it sent
    one; a shared no-op when tracing is off."""
    traced = tracer(service)
    if traced is None:
        return _NO_SPAN
    carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
    parent = propagate.extract(carrier)
    return traced.start_as_current_span(method, context=parent, kind=trace.SpanKind.SERVER)


@contextmanager
def span(service: str, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span | None]:
    """A span of `service`'s own work inside the current one (None, and nothing recorded, when off)."""
    traced = tracer(service)
    if traced is None:
        yield None
        return
    with traced.start_as_current_span(name, attributes=attributes) as current:
        yield current


def past_span(service: str, name: str, started_perf_ns: int, ended_perf_ns: int) -> None:
    """Record, inside the current span, a stage timed with `time.perf_counter_ns` that has just ended
    (its work made no calls that need it as their parent)."""
    traced = tracer(service)
    if traced is None:
        return
    to_epoch = time.time_ns() - time.perf_counter_ns()
    traced.start_span(name, start_time=started_perf_ns + to_epoch).end(end_time=ended_perf_ns + to_epoch)


def trace_id() -> str:
    """The current trace's id in hex ("" outside a recorded span), for log lines."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid and context.trace_flags.sampled else ""


def _with_trace(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=otel_context.get_current())
    if not carrier:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()), *carrier.items())
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _Propagate(
    grpc.aio.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.aio.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
    grpc.aio.StreamUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.aio.StreamStreamClientInterceptor,  # type: ignore[type-arg]
):
    """Puts the current span's `traceparent` on every call a channel makes."""

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_trace(details), request)

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_trace(details), request)

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_trace(details), requests)

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_trace(details), requests)


def client_interceptors() -> list[Any]:
    """What a channel needs to carry traces: nothing when tracing is off."""
    return [_Propagate()] if enabled() else []
