"""The console's web application: its routes, who may use each, and the protections every response and
every form carries (session cookie, CSRF token, same-origin check, content security policy)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qsl

import grpc
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from console import admin_pages, pages
from console.clients import Caller, ConsoleClients, SignInRefused, valid_name
from console.config import ConsoleConfig
from console.controls import OrderInvalid, parse_order
from console.sessions import (
    COOKIE_NAME,
    CSRF_FIELD,
    ConsoleRole,
    Session,
    SessionStore,
    SignedIn,
    ViewerTokens,
    csrf_matches,
)
from console.watch import Watch
from egbe.v1 import gateway_pb2
from services.logging import get_logger
from services.vocabulary import TIERS_BY_NAME

log = get_logger(__name__)
STATIC = Path(__file__).parent / "static"
MAX_FORM_BYTES = 16 * 1024
_TOKEN = re.compile(r"^[\x21-\x7e]{16,512}$")  # what a bearer token can be: visible ASCII, 16-512 long
FIRST_PAGE_WAIT_SECONDS = 3.0
ORI_PAGE_SIZE = 50
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # (no-referrer makes Chromium send `Origin: null`)
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# gRPC refusals a page shows as the caller's mistake or lack of right, with their HTTP status.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
}

Handler = Callable[[Request], Awaitable[Response]]


def _with_cookie(response: Response, session: Session | None) -> Response:
    """The session's cookie on a response: HttpOnly, SameSite=Strict (Secure is added over https)."""
    if session is not None:
        response.set_cookie(COOKIE_NAME, session.session_id, httponly=True, samesite="strict", path="/")
    return response


class Forbidden(Exception):
    """A request this session may not make (no CSRF token, another origin, a viewer's control)."""


class Console:
    """The routes, over one set of clients, one session store and one shared poll loop."""

    def __init__(
        self, clients: ConsoleClients, config: ConsoleConfig, viewers: ViewerTokens, watch: Watch
    ) -> None:
        self.clients = clients
        self.config = config
        self.viewers = viewers
        self.watch = watch
        self.sessions = SessionStore(config.session_idle_seconds, config.max_sessions)

    # -- plumbing ---------------------------------------------------------------------------------

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE_NAME))

    def html(self, body: str, session: Session | None, status: int = 200) -> Response:
        return _with_cookie(HTMLResponse(body, status_code=status), session)

    def reader_for(self, user: SignedIn) -> Caller:
        """Whose token a page's reads carry: an operator's own; a viewer's, the console's reader token under
        the viewer's name (a viewer's token is the console's alone and opens nothing at the gateway)."""
        if user.token is not None:
            return Caller(user.name, user.token)
        return Caller(f"viewer:{user.name}", self.clients.reader.token)

    async def form(self, request: Request, session: Session | None) -> dict[str, str]:
        """A same-origin, urlencoded form carrying its session's CSRF token; Forbidden otherwise."""
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise Forbidden("the form came from another origin")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise Forbidden("the form is too large")
        fields = dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
        if not csrf_matches(session, fields.get(CSRF_FIELD)):
            raise Forbidden("the form's CSRF token is missing or wrong; reload the page and try again")
        return fields

    def signed_in(self, handler: Callable[[Request, Session, SignedIn], Awaitable[Response]]) -> Handler:
        """Sign-in required (else to the sign-in page); gateway refusals and outages become pages."""

        async def guarded(request: Request) -> Response:
            session = self.session(request)
            if session is None or session.user is None:
                return RedirectResponse("/signin", status_code=303)
            try:
                return await handler(request, session, session.user)
            except Forbidden as refusal:
                return self.html(admin_pages.message_page(session, "Refused", str(refusal)), session, 403)
            except grpc.aio.AioRpcError as error:
                status = _HTTP_STATUS.get(error.code(), 502)
                said = f"the services answered {error.code().name}: {error.details()}"
                return self.html(admin_pages.message_page(session, "Not shown", said), session, status)

        return guarded

    # -- signing in -------------------------------------------------------------------------------

    async def signin_form(self, request: Request) -> Response:
        session = self.session(request) or self.sessions.new()
        return self.html(admin_pages.signin_page(session), session)

    async def signin(self, request: Request) -> Response:
        session = self.session(request)
        try:
            fields = await self.form(request, session)
        except Forbidden as refusal:
            return self.html(admin_pages.message_page(None, "Refused", str(refusal)), None, 403)
        assert session is not None  # the CSRF check needs one
        name, token = fields.get("name", "").strip(), fields.get("token", "").strip()
        if not valid_name(name):
            page = admin_pages.signin_page(session, "Your name: 1-64 letters, digits, '.', '_', '@' or '-'.")
            return self.html(page, session, 400)
        if not _TOKEN.match(token):
            page = admin_pages.signin_page(session, "Not signed in: that is not a token.")
            return self.html(page, session, 401)
        viewer = self.viewers.name_of(token)
        if viewer is not None:
            user = SignedIn(viewer, ConsoleRole.VIEWER)
        else:
            try:
                await self.clients.check_operator(Caller(name, token))
            except SignInRefused as refusal:
                log.warning("console sign-in refused", name=name, why=str(refusal))
                return self.html(admin_pages.signin_page(session, f"Not signed in: {refusal}."), session, 401)
            user = SignedIn(name, ConsoleRole.OPERATOR, token)
        log.info("console sign-in", name=user.name, role=user.role.value)
        return _with_cookie(RedirectResponse("/", status_code=303), self.sessions.sign_in(session, user))

    async def signout(self, request: Request, session: Session, user: SignedIn) -> Response:
        await self.form(request, session)
        self.sessions.drop(session.session_id)
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE_NAME, path="/")
        return response

    # -- watching ---------------------------------------------------------------------------------

    async def first_poll(self, calls_of: str = "") -> None:
        """Let a page's first render show figures: wait (briefly) for the loop's first read."""
        with self.watch.watching(calls_of):
            if self.watch.polls == 0:
                await self.watch.landed(FIRST_PAGE_WAIT_SECONDS)

    async def worlds(self, request: Request, session: Session, user: SignedIn) -> Response:
        await self.first_poll()
        return self.html(pages.worlds_page(session, self.watch.summaries()), session)

    async def world(self, request: Request, session: Session, user: SignedIn) -> Response:
        world_id = request.path_params["world_id"]
        await self.first_poll(calls_of=world_id)
        view = self.watch.worlds.get(world_id)
        summary = view.summary(self.watch.global_controls) if view else None
        history = list(view.history) if view else []
        return self.html(pages.world_page(session, world_id, summary, history), session)

    async def events(self, request: Request, session: Session, user: SignedIn) -> Response:
        """Server-sent events: every world's summary, or one world's, after each poll."""
        world_id = request.path_params.get("world_id")
        after = request.query_params.get("after", "0")
        after_row = int(after) if after.isdigit() else 0

        async def stream() -> AsyncIterator[str]:
            async for update in self.watch.updates(world_id, after_row):
                if self.sessions.get(session.session_id) is None:
                    return  # signed out (or expired) while watching
                yield ": keepalive\n\n" if update is None else f"data: {json.dumps(update)}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )

    async def ori(self, request: Request, session: Session, user: SignedIn) -> Response:
        world_id, ori_id = request.path_params["world_id"], request.path_params["ori_id"]
        caller = self.reader_for(user)
        identity = await self.clients.identity(caller, ori_id)
        events = await self.clients.timeline(caller, ori_id, request.query_params.get("events", ""), 200)
        page = await self.clients.audit_page(
            caller,
            gateway_pb2.ListAuditRecordsRequest(
                ori_id=ori_id, page_size=ORI_PAGE_SIZE, page_token=request.query_params.get("calls", "")
            ),
        )
        calls = [r for r in page.records if r.ori.world_id == world_id]
        body = pages.ori_page(
            session,
            world_id=world_id,
            ori_id=ori_id,
            identity=identity,
            events=events,
            calls=calls,
            calls_next=page.next_page_token,
        )
        return self.html(body, session)

    # -- controlling ------------------------------------------------------------------------------

    async def controls(self, request: Request, session: Session, user: SignedIn) -> Response:
        controls = await self.clients.controls(self.reader_for(user), include_inactive=True)
        world_id = request.query_params.get("world_id", "")
        return self.html(admin_pages.controls_page(session, controls, world_id), session)

    def operator(self, user: SignedIn) -> Caller:
        """The operator a control is sent as; Forbidden for a viewer."""
        if not user.may_control or user.token is None:
            raise Forbidden(f"{user.name} is a viewer: viewers see everything and control nothing")
        return Caller(user.name, user.token)

    async def review(self, request: Request, session: Session, user: SignedIn) -> Response:
        fields = await self.form(request, session)
        self.operator(user)
        try:
            order = parse_order(fields)
        except OrderInvalid as invalid:
            return self.html(
                admin_pages.message_page(session, "Not a valid control", str(invalid)), session, 400
            )
        return self.html(admin_pages.confirm_page(session, order), session)

    async def apply(self, request: Request, session: Session, user: SignedIn) -> Response:
        fields = await self.form(request, session)
        caller = self.operator(user)
        try:
            order = parse_order(fields)
        except OrderInvalid as invalid:
            return self.html(
                admin_pages.message_page(session, "Not a valid control", str(invalid)), session, 400
            )
        try:
            outcome = await order.send(self.clients, caller)
        except grpc.aio.AioRpcError as error:
            said = f"{error.code().name}: {error.details()}"
            status = _HTTP_STATUS.get(error.code(), 502)
            return self.html(admin_pages.result_page(session, order, said, ok=False), session, status)
        log.info("console control", operator=user.name, order=order.describe(), outcome=outcome)
        self.watch.note_control(order.world_shown, f"{order.describe()} (by {user.name}) → {outcome}")
        return self.html(admin_pages.result_page(session, order, outcome, ok=True), session)

    # -- audit ------------------------------------------------------------------------------------

    def _audit_request(self, filters: dict[str, str]) -> gateway_pb2.ListAuditRecordsRequest:
        tier = TIERS_BY_NAME.get(filters.get("tier", ""), 0)
        return gateway_pb2.ListAuditRecordsRequest(
            ori_id=filters.get("ori_id", ""),
            tier=tier,  # type: ignore[arg-type]
            run_id=filters.get("run_id", ""),
            kernel_call_id=filters.get("kernel_call_id", ""),
            page_size=ORI_PAGE_SIZE,
            page_token=filters.get("records", ""),
        )

    async def audit(self, request: Request, session: Session, user: SignedIn) -> Response:
        filters = {k: v.strip() for k, v in request.query_params.items()}
        caller = self.reader_for(user)
        records = await self.clients.audit_page(caller, self._audit_request(filters))
        world_id = filters.get("world_id", "")
        shown = [r for r in records.records if not world_id or r.ori.world_id == world_id]
        decision = {"allowed": 1, "refused": 2}.get(filters.get("decision", ""), 0)
        attempts = await self.clients.attempts_page(
            caller,
            gateway_pb2.ListOperatorAttemptsRequest(
                decision=decision,  # type: ignore[arg-type]
                method=filters.get("method", ""),
                operator_id=filters.get("operator_id", ""),
                page_size=ORI_PAGE_SIZE,
                page_token=filters.get("attempts", ""),
            ),
        )
        body = admin_pages.audit_page(
            session,
            filters=filters,
            records=shown,
            records_next=records.next_page_token,
            attempts=list(attempts.attempts),
            attempts_next=attempts.next_page_token,
        )
        return self.html(body, session)

    async def export(self, request: Request, session: Session, user: SignedIn) -> Response:
        filters = {k: v.strip() for k, v in request.query_params.items() if k != "records"}
        request_message = self._audit_request(filters)
        request_message.page_size = 1_000
        world_id = filters.get("world_id", "")
        caller = self.reader_for(user)

        async def lines() -> AsyncIterator[str]:
            async for record in self.clients.audit_records(caller, request_message):
                if not world_id or record.ori.world_id == world_id:
                    as_dict = json_format.MessageToDict(record, preserving_proto_field_name=True)
                    yield json.dumps(as_dict, ensure_ascii=False) + "\n"

        return StreamingResponse(
            lines(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": 'attachment; filename="egbe-audit.jsonl"'},
        )

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        media = {"console.js": "text/javascript", "console.css": "text/css"}.get(name)
        if media is None:
            return Response("not found", status_code=404)
        return Response((STATIC / name).read_bytes(), media_type=media)


class SecurityHeaders:
    """Every response gets the security headers; a cookie set over https is marked Secure. Plain ASGI,
    so a server-sent events stream passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        secure = scope.get("scheme") == "https"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
                if secure:
                    cookies = headers.getlist("set-cookie")
                    del headers["set-cookie"]
                    for cookie in cookies:
                        headers.append("set-cookie", cookie if "Secure" in cookie else f"{cookie}; Secure")
            await send(message)

        await self.app(scope, receive, with_headers)


def build_app(console: Console) -> Starlette:
    """The Starlette application, every response wrapped in `SecurityHeaders`."""
    c = console
    routes = [
        Route("/signin", c.signin_form, methods=["GET"]),
        Route("/signin", c.signin, methods=["POST"]),
        Route("/signout", c.signed_in(c.signout), methods=["POST"]),
        Route("/", c.signed_in(c.worlds), methods=["GET"]),
        Route("/events/worlds", c.signed_in(c.events), methods=["GET"]),
        Route("/events/worlds/{world_id}", c.signed_in(c.events), methods=["GET"]),
        Route("/worlds/{world_id}", c.signed_in(c.world), methods=["GET"]),
        Route("/worlds/{world_id}/ori/{ori_id}", c.signed_in(c.ori), methods=["GET"]),
        Route("/controls", c.signed_in(c.controls), methods=["GET"]),
        Route("/controls/review", c.signed_in(c.review), methods=["POST"]),
        Route("/controls/apply", c.signed_in(c.apply), methods=["POST"]),
        Route("/audit", c.signed_in(c.audit), methods=["GET"]),
        Route("/audit/export.jsonl", c.signed_in(c.export), methods=["GET"]),
        Route("/static/{name}", c.static, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)])
