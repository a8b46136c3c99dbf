"""What one service's server bounds, so no client can make it queue, buffer or log without end.

gRPC itself bounds message sizes, streams per connection, connection age and idleness, and the time a
connection may take to send its HTTP/2 preface (`server_options`); the chassis bounds the calls in
progress (`CallLimit`, which sheds the next one with RESOURCE_EXHAUSTED and a RetryInfo rather than
letting it wait) and how many refusal lines reach the log (`RateLimitedLog`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from services.errors import ResourceExhausted
from services.logging import get_logger
from services.settings import ChassisSettings, ServerLimits

_WINDOW_SECONDS = 60.0


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def server_options(settings: ChassisSettings, limits: ServerLimits) -> list[tuple[str, Any]]:
    """The grpc.aio server options of one service."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limits.max_message_bytes),
        ("grpc.max_send_message_length", limits.max_message_bytes),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        ("grpc.max_connection_age_ms", _ms(settings.max_connection_age_seconds)),
        ("grpc.max_connection_idle_ms", _ms(settings.max_connection_idle_seconds)),
        # Covers the TLS handshake and the client's HTTP/2 SETTINGS frame: a connection that never
        # sends its preface is closed when it runs out.
        ("grpc.server_handshake_timeout_ms", _ms(settings.handshake_timeout_seconds)),
    ]
    if settings.max_connection_age_grace_seconds is not None:
        options.append(("grpc.max_connection_age_grace_ms", _ms(settings.max_connection_age_grace_seconds)))
    return options


class RateLimitedLog:
    """Writes at most `per_minute` warning lines a minute; the lines it holds back are counted and the
    count rides on the next line it writes (`suppressed`), so a flood costs a counter, not the log."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._window_start = clock()
        self._written = 0
        self._suppressed = 0

    def warning(self, event: str, **fields: Any) -> None:
        now = self._clock()
        if now - self._window_start >= _WINDOW_SECONDS:
            self._window_start = now
            self._written = 0
        if self._written >= self._per_minute:
            self._suppressed += 1
            return
        self._written += 1
        suppressed, self._suppressed = self._suppressed, 0
        get_logger(__name__).warning(event, suppressed=suppressed, **fields)


class CallLimit:
    """Calls in progress on one service; past the limit a call is shed at once, never queued.

    Every call runs on the service's one event loop, so a plain counter is exact."""

    def __init__(
        self, service: str, limit: int, retry_after_seconds: float, refusals: RateLimitedLog
    ) -> None:
        self._service = service
        self._limit = limit
        self._retry_after = retry_after_seconds
        self._refusals = refusals
        self.in_progress = 0

    @contextmanager
    def held(self, method: str, peer: str) -> Iterator[None]:
        """One slot for the duration of a call (a stream's whole life), or ResourceExhausted."""
        if self.in_progress >= self._limit:
            self._refusals.warning("call shed", rpc=method, peer=peer, in_progress=self.in_progress)
            raise ResourceExhausted(
                f"{self._service} has {self._limit} calls in progress, its limit; retry after "
                f"{self._retry_after:g} s",
                metadata={"limit": str(self._limit)},
                retry_after_seconds=self._retry_after,
            )
        self.in_progress += 1
        try:
            yield
        finally:
            self.in_progress -= 1
