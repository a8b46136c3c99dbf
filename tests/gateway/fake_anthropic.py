"""A local fake of the Anthropic Messages API on a real socket: scripted errors, delays, batches, counts."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.gateway.fake_http import FakeServer, JSONHandler

# A model that answers later than any test waits: its calls end by a kill, a cancel or a deadline.
SLOW_MODEL_SECONDS = 30.0


@dataclass
class Scripted:
    """One scripted answer: an HTTP status, a JSON body and headers; None body = a normal message."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


def error_body(error_type: str, message: str, error_code: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code:
        error["details"] = {"error_code": error_code}
    return {"type": "error", "error": error}


def message_body(text: str, *, model: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 120,
            "output_tokens": 40,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    }


class FakeAnthropic(FakeServer):
    """Answers /v1/messages from a script (then a default reply); records every request it received."""

    def __init__(
        self,
        reply_text: str = '{"utterance":"hi","addressed_to":"Bram","emotion":"warm"}',
        responder: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.reply_text = reply_text
        # When set, the reply text is worked out from each request's parameters (a scripted body wins).
        self.responder = responder
        self.script: deque[Scripted] = deque()
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.default_delay_seconds = 0.0
        self.batch_polls_before_end = 1
        self._batches: dict[str, dict[str, Any]] = {}
        super().__init__(self._handler_class())

    def _handler_class(self) -> type[JSONHandler]:
        fake = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                path, payload = self.read_json()
                with fake._lock:
                    fake.requests.append(("POST", path, payload))
                if path == "/v1/messages/count_tokens":
                    self.send_json(200, {"input_tokens": 321})
                elif path == "/v1/messages/batches":
                    self.send_json(200, fake._create_batch(payload))
                else:
                    with fake._lock:
                        scripted = fake.script.popleft() if fake.script else Scripted()
                    time.sleep(scripted.delay_seconds or fake.default_delay_seconds)
                    body = scripted.body or message_body(
                        fake.text_for(payload), model=payload.get("model", "?")
                    )
                    try:
                        self.send_json(scripted.status, body, scripted.headers)
                    except (BrokenPipeError, ConnectionResetError):
                        return  # the client gave up (timeout, cancellation)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                with fake._lock:
                    fake.requests.append(("GET", path, {}))
                parts = path.strip("/").split("/")
                batch_id = parts[3]
                batch = fake._batches[batch_id]
                if parts[-1] == "results":
                    line = {
                        "custom_id": batch["custom_id"],
                        "result": {"type": "succeeded", "message": batch["message"]},
                    }
                    raw = (json.dumps(line) + "\n").encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/binary")
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                batch["polls"] += 1
                self.send_json(
                    200, fake._batch_view(batch_id, ended=batch["polls"] >= fake.batch_polls_before_end)
                )

        return Handler

    def text_for(self, params: dict[str, Any]) -> str:
        return self.responder(params) if self.responder is not None else self.reply_text

    @property
    def base_url(self) -> str:
        return self.root_url

    def message_requests(self) -> list[dict[str, Any]]:
        return [body for method, path, body in self.requests if method == "POST" and path == "/v1/messages"]

    async def until_requests(self, count: int) -> None:
        """Wait (up to 5 s) until `count` model calls reached the fake: the adapter is waiting on them."""
        for _ in range(500):
            if len(self.message_requests()) >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the fake API never saw {count} model calls")

    def _create_batch(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = payload["requests"][0]
        batch_id = f"msgbatch_{len(self._batches) + 1}"
        message = message_body(self.text_for(request["params"]), model=request["params"]["model"])
        self._batches[batch_id] = {"custom_id": request["custom_id"], "message": message, "polls": 0}
        return self._batch_view(batch_id, ended=False)

    def _batch_view(self, batch_id: str, *, ended: bool) -> dict[str, Any]:
        counts = {
            "processing": 0 if ended else 1,
            "succeeded": 1 if ended else 0,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        }
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": counts,
            "ended_at": "2026-01-01T00:00:00Z" if ended else None,
            "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z",
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.base_url}/v1/messages/batches/{batch_id}/results" if ended else None,
        }
