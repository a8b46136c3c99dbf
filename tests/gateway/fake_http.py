"""What the local fakes of model APIs share: a JSON server on a real socket (port 0) in a thread, and
a recorder of the retry loop's waits."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class JSONHandler(BaseHTTPRequestHandler):
    """A handler that answers JSON and logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def read_json(self) -> tuple[str, dict[str, Any]]:
        """The request's path (without its query) and its JSON body."""
        length = int(self.headers.get("content-length", 0))
        return self.path.split("?")[0], json.loads(self.rfile.read(length) or b"{}")

    def send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)


class FakeServer:
    """A threading HTTP server on 127.0.0.1, port 0, serving `handler` from a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def record_waits(adapter: Any) -> list[float]:
    """The waits the adapter's retry loop asks for, recorded instead of slept so tests stay fast."""
    waits: list[float] = []

    async def record_wait(seconds: float) -> None:
        waits.append(seconds)

    adapter._sleep = record_wait
    return waits
