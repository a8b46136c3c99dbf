"""A local fake of an OpenAI-compatible /v1/chat/completions server on a real socket: scripted errors and
delays, servers with and without json_schema support, servers that report no usage."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tests.gateway.fake_anthropic import Scripted
from tests.gateway.fake_http import FakeServer, JSONHandler

COMPLETIONS_PATH = "/v1/chat/completions"
PROMPT_TOKENS = 120
COMPLETION_TOKENS = 40


def error_body(
    message: str, error_type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def completion_body(text: str, *, model: str, usage: bool, cached_tokens: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }
    return body


class FakeOpenAI(FakeServer):
    """Answers /v1/chat/completions from a script (then a default reply); records every request it got.

    `schema_support=False` is a server without response_format json_schema: it answers such a request 400,
    as many do. `report_usage=False` is a server whose replies carry no usage. `responder` works the reply
    text out from each request; `unscripted` answers every request the script does not (a server that is
    down)."""

    def __init__(
        self,
        reply_text: str = '{"utterance":"hi","addressed_to":"Bram","emotion":"warm"}',
        *,
        schema_support: bool = True,
        report_usage: bool = True,
        responder: Callable[[dict[str, Any]], str] | None = None,
        unscripted: Scripted | None = None,
    ) -> None:
        self.reply_text = reply_text
        self.responder = responder
        self.unscripted = unscripted or Scripted()
        self.schema_support = schema_support
        self.report_usage = report_usage
        self.cached_tokens = 0
        self.script: deque[Scripted] = deque()
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        super().__init__(self._handler_class())

    def _handler_class(self) -> type[JSONHandler]:
        fake = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                path, payload = self.read_json()
                with fake._lock:
                    fake.requests.append((path, payload, {k.lower(): v for k, v in self.headers.items()}))
                    scripted = fake.script.popleft() if fake.script and path == COMPLETIONS_PATH else None
                status, body, headers = fake._answer(path, payload, scripted or fake.unscripted)
                time.sleep(scripted.delay_seconds if scripted else 0.0)
                try:
                    self.send_json(status, body, headers)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up (timeout, cancellation)

        return Handler

    def _answer(
        self, path: str, payload: dict[str, Any], scripted: Scripted
    ) -> tuple[int, Any, dict[str, str]]:
        if path != COMPLETIONS_PATH:
            return 404, error_body(f"no route {path}", "not_found_error"), {}
        if scripted.body is not None or scripted.status != 200:
            return scripted.status, scripted.body or {}, scripted.headers
        kind = (payload.get("response_format") or {}).get("type")
        if kind == "json_schema" and not self.schema_support:
            return 400, error_body("response_format of type json_schema is not supported"), {}
        body = completion_body(
            self.responder(payload) if self.responder is not None else self.reply_text,
            model=payload.get("model", "?"),
            usage=self.report_usage,
            cached_tokens=self.cached_tokens,
        )
        return 200, body, scripted.headers

    @property
    def base_url(self) -> str:
        """The API root a client is given, ending in /v1 as OpenAI-compatible servers publish it."""
        return f"{self.root_url}/v1"

    def completion_requests(self) -> list[dict[str, Any]]:
        return [body for path, body, _ in self.requests if path == COMPLETIONS_PATH]
