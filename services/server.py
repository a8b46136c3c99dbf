"""grpc.aio server bootstrap: auth, load shedding and error mapping around every handler, health,
reflection, shutdown.

An exception no handler turned into a refusal is logged with its traceback under a correlation id,
and the client is told only that id: a Python message can carry state nobody outside should read.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import structlog
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from prometheus_client import CollectorRegistry

from egbe.v1 import gateway_pb2
from services.auth import (
    AUTHORIZATION_HEADER,
    Principal,
    RefusalHook,
    Role,
    TokenStore,
    authorize,
    enter_call,
)
from services.channels import server_credentials, uses_tls
from services.errors import EgbeError, Internal, InvalidArgument, to_rpc_status
from services.grpc_types import Context, GenericHandler, MethodHandler
from services.limits import CallLimit, RateLimitedLog, server_options
from services.logging import bind_context, get_logger
from services.metrics import MetricsEndpoint, RpcStats, serve_metrics
from services.settings import ChassisSettings, Endpoint, ServerLimits, TlsSettings
from services.tracing import server_span, trace_id

log = get_logger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
OPERATOR_SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name

AddServicer = Callable[[Any, grpc.aio.Server], None]


@dataclass
class ServiceBundle:
    """What one Egbe service contributes to a server: servicers, the roles per RPC, a close hook."""

    name: str
    servicers: list[tuple[AddServicer, Any]]
    # Full gRPC service name -> {method name -> admitted roles}; every method must be listed.
    method_roles: Mapping[str, Mapping[str, frozenset[Role]]]
    close: Callable[[], Awaitable[None]] | None = None
    # Extra metadata shown by health tooling, e.g. {"core": "c"}.
    info: dict[str, str] = field(default_factory=dict)
    # The service's own metric families, served with the chassis's RPC figures where its endpoint
    # names a metrics port (None: the chassis's alone).
    metrics: CollectorRegistry | None = None
    # Parts with a gRPC health name of their own, which can be down while the service serves (e.g. a
    # dependency left unwired): None = SERVING, else NOT_SERVING and why (`egbe up` logs it at start).
    health_parts: dict[str, str | None] = field(default_factory=dict)
    # Told of every call refused for who made it (no token, wrong role, outside the token's scope)
    # before it answers, e.g. to audit it; the token itself is never passed.
    on_refused: RefusalHook | None = None

    def roles_for(self, full_method: str) -> frozenset[Role] | None:
        """Roles admitted to `/pkg.Service/Method`, or None when the method is not declared."""
        _, service, method = full_method.split("/", 2)
        return self.method_roles.get(service, {}).get(method)


def _status_for(error: EgbeError) -> grpc.Status:
    return rpc_status.to_status(to_rpc_status(error))


def _authorization(metadata: Any) -> str | None:
    """The authorization header among the call's metadata (None when absent or binary)."""
    for key, value in metadata or ():
        if key == AUTHORIZATION_HEADER and isinstance(value, str):
            return value
    return None


class Chassis:
    """Authenticates, authorizes, sheds load, binds log context and maps errors for every RPC.

    Every method handler is wrapped once, when its servicer registers (see `_Registrar`), not per
    call: a call pays one dict-free check of its own metadata and a counter, and no server
    interceptor (whose async pipeline grpc.aio runs for every call) is installed at all.
    One chassis serves all of a service's listeners, so they share its limit on calls in progress.
    """

    def __init__(
        self, bundle: ServiceBundle, tokens: TokenStore, limits: ServerLimits, settings: ChassisSettings
    ) -> None:
        self._bundle = bundle
        self._tokens = tokens
        self._refusals = RateLimitedLog(settings.refusal_log_lines_per_minute)
        self.calls = CallLimit(
            bundle.name, limits.max_concurrent_calls, settings.shed_retry_after_seconds, self._refusals
        )
        self.rpc = RpcStats(bundle.name)

    def guard(self, method: str) -> Callable[[Context], None]:
        """The check run before `method`'s handler: who is calling, and may that role call it."""
        admitted = self._bundle.roles_for(method) or frozenset()
        service_name = self._bundle.name
        principal_of = self._tokens.principal_of
        on_refused = self._bundle.on_refused
        refusals = self._refusals

        def report(context: Context, refusal: EgbeError, principal: Principal | None) -> None:
            refusals.warning(
                "call refused",
                rpc=method,
                peer=context.peer(),
                code=refusal.code.name,
                caller=principal.token_id if principal is not None else None,
                why=refusal.message,
            )
            if on_refused is not None:
                on_refused(method, refusal, principal, context.peer())

        def check(context: Context) -> None:
            structlog.contextvars.clear_contextvars()
            structlog.contextvars.bind_contextvars(service=service_name)
            principal: Principal | None = None
            try:
                principal = principal_of(_authorization(context.invocation_metadata()))
                authorize(principal.role, admitted, method)
            except EgbeError as refusal:
                report(context, refusal, principal)
                raise
            enter_call(principal, lambda refusal: report(context, refusal, principal))

        return check

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler:
        service, rpc, check = self._bundle.name, self.rpc, self.guard(method)

        def observed(context: Context) -> AbstractContextManager[Any]:
            span = server_span(service, method, context.invocation_metadata())
            return _Observed(rpc, method, span, lambda: check(context))

        return _wrap_handler(handler, method, self.calls, observed)


class _Observed:
    """One call inside its server span, checked (`check`: who is calling), then timed and counted by
    its answer's code (`RpcStats`), a refused caller included."""

    __slots__ = ("_check", "_method", "_span", "_started", "_stats")

    def __init__(
        self, stats: RpcStats, method: str, span: AbstractContextManager[Any], check: Callable[[], None]
    ) -> None:
        self._stats, self._method, self._span, self._check = stats, method, span, check
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()
        self._span.__enter__()
        try:
            self._check()
        except BaseException as error:
            self.__exit__(type(error), error, error.__traceback__)
            raise
        traced = trace_id()
        if traced:
            bind_context(trace_id=traced)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        self._span.__exit__(kind, error, tb)
        self._stats.observe(self._method, _code_name(error), time.perf_counter() - self._started)


def _code_name(error: BaseException | None) -> str:
    """The status a call is answered with, by what ended it (see `_fail`)."""
    if error is None:
        return "OK"
    if isinstance(error, EgbeError):
        return error.code.name
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN" if isinstance(error, grpc.aio.AbortError) else "INTERNAL"


class _GuardedGenericHandler(GenericHandler):
    """A servicer's generic handler whose answers are wrapped by the chassis, once per method."""

    def __init__(self, inner: GenericHandler, chassis: Chassis, exposed: frozenset[str]) -> None:
        self._inner = inner
        self._chassis = chassis
        self._exposed = exposed
        self._wrapped: dict[str, tuple[MethodHandler, MethodHandler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> MethodHandler | None:
        method: str = handler_call_details.method
        handler = self._inner.service(handler_call_details)
        service = method.split("/")[1] if method.count("/") >= 2 else ""
        if handler is None or service not in self._exposed:
            return None
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, self._chassis.wrap(method, handler))
        return cached[1]


class _Registrar:
    """What a bundle's servicers register on in place of the grpc.aio server.

    Each method handler is wrapped by the chassis as it is registered; services the listener does not
    expose are not registered at all, so they answer UNIMPLEMENTED as if they did not exist.
    """

    def __init__(self, server: grpc.aio.Server, chassis: Chassis, exposed: frozenset[str]) -> None:
        self._server = server
        self._chassis = chassis
        self._exposed = exposed

    def add_generic_rpc_handlers(self, handlers: Sequence[GenericHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            [_GuardedGenericHandler(handler, self._chassis, self._exposed) for handler in handlers]
        )

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, MethodHandler]) -> None:
        if service not in self._exposed:
            return
        wrapped = {name: self._chassis.wrap(f"/{service}/{name}", h) for name, h in handlers.items()}
        # grpc-stubs predate registered methods (grpcio >= 1.62).
        self._server.add_registered_method_handlers(service, wrapped)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Undecodable:
    """A request whose bytes do not parse as the RPC's message; refused after authentication."""

    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """Defer a parse failure to the handler, which answers INVALID_ARGUMENT instead of gRPC's UNKNOWN."""
    if deserializer is None:
        return None
    parse = deserializer

    def deserialize(raw: bytes) -> Any:
        try:
            return parse(raw)
        except DecodeError as exc:
            return _Undecodable(str(exc))

    return deserialize


def _decoded(request: Any) -> Any:
    if isinstance(request, _Undecodable):
        raise InvalidArgument.field("request", f"is not a valid message of this RPC's type: {request.reason}")
    return request


async def _decoded_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        yield _decoded(request)


async def _fail(context: Context, method: str, error: Exception) -> None:
    """Answer a failed call: a refusal as itself, anything else as INTERNAL naming only a log entry."""
    if not isinstance(error, EgbeError):
        correlation_id = secrets.token_hex(8)
        get_logger(__name__).error(
            "unexpected exception", rpc=method, correlation_id=correlation_id, exc_info=error
        )
        error = Internal(correlation_id)
    status = _status_for(error)
    await context.abort(status.code, status.details, status.trailing_metadata)


def _wrap_handler(
    handler: MethodHandler,
    method: str,
    calls: CallLimit,
    observed: Callable[[Context], AbstractContextManager[Any]],
) -> MethodHandler:
    """Check the caller and hold a call slot, the whole call `observed` (checked, timed, counted,
    traced), and answer every exception as a status with details, for all four call shapes. An
    abort the handler made itself passes through as it is."""

    behaviours: Any = handler
    deserializer = _tolerant(handler.request_deserializer)
    if behaviours.unary_unary is not None:
        inner_uu = behaviours.unary_unary

        async def unary_unary(request: Any, context: Context) -> Any:
            try:
                with observed(context), calls.held(method, context.peer()):
                    return await inner_uu(_decoded(request), context)
            except grpc.aio.AbortError:
                raise
            except Exception as error:
                await _fail(context, method, error)

        return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, handler.response_serializer)
    if behaviours.unary_stream is not None:
        inner_us = behaviours.unary_stream

        async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                with observed(context), calls.held(method, context.peer()):
                    async for item in inner_us(_decoded(request), context):
                        yield item
            except grpc.aio.AbortError:
                raise
            except Exception as error:
                await _fail(context, method, error)

        return grpc.unary_stream_rpc_method_handler(unary_stream, deserializer, handler.response_serializer)
    if behaviours.stream_unary is not None:
        inner_su = behaviours.stream_unary

        async def stream_unary(requests: Any, context: Context) -> Any:
            try:
                with observed(context), calls.held(method, context.peer()):
                    return await inner_su(_decoded_stream(requests), context)
            except grpc.aio.AbortError:
                raise
            except Exception as error:
                await _fail(context, method, error)

        return grpc.stream_unary_rpc_method_handler(stream_unary, deserializer, handler.response_serializer)
    inner_ss = behaviours.stream_stream

    async def stream_stream(requests: Any, context: Context) -> AsyncIterator[Any]:
        try:
            with observed(context), calls.held(method, context.peer()):
                async for item in inner_ss(_decoded_stream(requests), context):
                    yield item
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _fail(context, method, error)

    return grpc.stream_stream_rpc_method_handler(stream_stream, deserializer, handler.response_serializer)


@dataclass
class Listener:
    """One gRPC server of a service: the address it listens on and the services it exposes."""

    server: grpc.aio.Server
    health: HealthServicer
    target: str
    exposed: frozenset[str]


@dataclass
class RunningService:
    """A started service: its listeners (the first is its own endpoint) and how to stop it gracefully."""

    bundle: ServiceBundle
    listeners: list[Listener]
    grace_seconds: float
    metrics: MetricsEndpoint | None = None

    @property
    def target(self) -> str:
        """Where the service's own endpoint listens."""
        return self.listeners[0].target

    async def stop(self) -> None:
        """Report NOT_SERVING, drain in-flight calls for the grace period, then close the service."""
        for listener in self.listeners:
            await listener.health.enter_graceful_shutdown()
        await asyncio.gather(*(listener.server.stop(self.grace_seconds) for listener in self.listeners))
        if self.metrics is not None:
            await self.metrics.stop()
        if self.bundle.close is not None:
            await self.bundle.close()
        log.info("service stopped", service=self.bundle.name)


def _bind(server: grpc.aio.Server, endpoint: Endpoint, tls: TlsSettings) -> str:
    """Listen on the endpoint: a unix socket in plaintext, TCP with TLS/mTLS when configured."""
    if endpoint.unix_socket is not None:
        path = Path(endpoint.unix_socket)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale socket from a killed process
        server.add_insecure_port(f"unix:{path}")
        return f"unix:{path}"
    address = f"{endpoint.host}:{endpoint.port}"
    if uses_tls(address, tls):
        port = server.add_secure_port(address, server_credentials(tls))
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"could not bind {endpoint.host}:{endpoint.port}")
    return f"{endpoint.host}:{port}"


def metrics_host(endpoint: Endpoint) -> str:
    """Where a service's Prometheus endpoint listens: on its gRPC endpoint's host, so the metrics
    reach exactly as far as the service does (loopback when the service listens on a unix socket)."""
    if endpoint.unix_socket is not None:
        return "127.0.0.1"
    return endpoint.host.removeprefix("[").removesuffix("]")


def listener_plan(
    bundle: ServiceBundle, endpoint: Endpoint, settings: ChassisSettings
) -> list[tuple[Endpoint, frozenset[str]]]:
    """Which gRPC services each listener exposes.

    With `operator_endpoint` set, OperatorService moves to that listener alone, so a network
    policy can admit operators to its port and nobody else (gRPC methods share a port otherwise).
    """
    services = frozenset(bundle.method_roles)
    if settings.operator_endpoint is None or OPERATOR_SERVICE not in services:
        return [(endpoint, services)]
    reserved = frozenset({OPERATOR_SERVICE})
    return [(endpoint, services - reserved), (settings.operator_endpoint, reserved)]


async def _listen(
    bundle: ServiceBundle,
    endpoint: Endpoint,
    *,
    exposed: frozenset[str],
    chassis: Chassis,
    settings: ChassisSettings,
    limits: ServerLimits,
) -> Listener:
    server = grpc.aio.server(options=server_options(settings, limits))
    registrar = _Registrar(server, chassis, exposed)
    for add, servicer in bundle.servicers:
        add(servicer, cast(grpc.aio.Server, registrar))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    # Probes and tooling reach health and reflection without a token: registered on the server itself.
    # Reflection lists every service on the port (OperatorService too, unless operator_endpoint
    # moves it), so production leaves it off unless configured.
    if settings.serves_reflection():
        names = [*sorted(exposed), HEALTH_SERVICE, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, server)
    target = _bind(server, endpoint, settings.tls)
    await server.start()
    for name in ["", *sorted(exposed)]:
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    for name, down in bundle.health_parts.items():
        await health.set(
            name,
            health_pb2.HealthCheckResponse.SERVING
            if down is None
            else health_pb2.HealthCheckResponse.NOT_SERVING,
        )
    transport = settings.tls.mode.value if uses_tls(target, settings.tls) else "plaintext"
    log.info(
        "service serving",
        service=bundle.name,
        target=target,
        transport=transport,
        exposes=sorted(exposed),
        **bundle.info,
    )
    return Listener(server, health, target, exposed)


async def start_service(
    bundle: ServiceBundle, endpoint: Endpoint, tokens: TokenStore, settings: ChassisSettings
) -> RunningService:
    """Serve one bundle on its endpoint(s) with health and reflection; returns once it is SERVING.

    Its limits are `settings.server_limits[bundle.name]`."""
    limits = settings.server_limits.get(bundle.name)
    if limits is None:
        raise ValueError(f"no server_limits for service {bundle.name!r}; name the bundle after a service")
    chassis = Chassis(bundle, tokens, limits, settings)
    listeners: list[Listener] = []
    try:
        for listen_on, exposed in listener_plan(bundle, endpoint, settings):
            listeners.append(
                await _listen(
                    bundle, listen_on, exposed=exposed, chassis=chassis, settings=settings, limits=limits
                )
            )
        metrics = None
        if endpoint.metrics_port is not None:
            registry = bundle.metrics or CollectorRegistry()
            registry.register(chassis.rpc)
            metrics = serve_metrics(endpoint.metrics_port, metrics_host(endpoint), registry)
    except BaseException:
        await asyncio.gather(*(listener.server.stop(None) for listener in listeners))
        raise
    return RunningService(bundle, listeners, settings.shutdown_grace_seconds, metrics)
