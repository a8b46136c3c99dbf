"""Serving a long-lived bidi stream of gateway messages: concurrently, bounded, refused one at a time.

A world server's dispatcher keeps one connection to the gateway for its lifetime; a unary RPC per run
pays a call's setup on both sides (about 2.5x the client CPU of a message on an open stream here), so
RunStream and AdmitStream carry the same requests as messages. What a message does is the unary
handler's business (the servicer passes it in); this module is only the stream's shape:

- messages are served concurrently, at most `MAX_IN_FLIGHT` per stream: beyond that the stream stops
  reading, and HTTP/2 flow control pushes back on the client;
- each answer echoes its message's `message_id`, unique among the stream's messages in flight;
- a refused message (any EgbeError) answers a `StreamMessageStatus`, and the stream goes on;
- a client that closes its side gets the answer of every message it sent; a stream cancelled or
  broken first has its messages in flight cancelled (`cancel_in_flight`: work not worth finishing for
  nobody, such as a model call) or finished (a store transaction cut short could leave a reservation
  nobody releases until the sweep);
- either way the caller's `on_close` runs last, so whatever the stream owned is released. Only
  bytes that are not a message (no id to answer) or an unexpected error (a bug) end the stream early,
  as they would end a unary call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

from egbe.v1 import gateway_pb2
from gateway.records import RunStatus
from gateway.service import CognitionGateway
from services.errors import EgbeError, InvalidArgument
from services.logging import get_logger

log = get_logger(__name__)

# Messages one stream may have in flight; a client pipelining more waits for answers.
MAX_IN_FLIGHT = 64
# The ending detail of a run its admitting stream left open.
STREAM_ENDED = "the stream that admitted the run ended"


class StreamMessage(Protocol):
    @property
    def message_id(self) -> int: ...


Request = TypeVar("Request", bound=StreamMessage)
Reply = TypeVar("Reply")


def message_status(error: EgbeError) -> gateway_pb2.StreamMessageStatus:
    """What the unary RPC's status would have said (code, message, ErrorInfo, BadRequest), as a message."""
    return gateway_pb2.StreamMessageStatus(
        code=error.code.value[0],
        message=error.message,
        reason=error.reason,
        metadata=error.metadata,
        field_violations=[
            gateway_pb2.StreamFieldViolation(field=v.field, description=v.description)
            for v in error.violations
        ],
    )


_DUPLICATE = InvalidArgument.field("message_id", "is already in flight on this stream")


async def serve_stream(
    requests: AsyncIterator[Request],
    answer: Callable[[Request], Awaitable[Reply]],
    reply_type: Callable[..., Reply],
    *,
    cancel_in_flight: bool,
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Reply]:
    """Answer each request with `answer`, up to MAX_IN_FLIGHT at once; an EgbeError answers a
    `reply_type(message_id=..., status=...)`.

    When the stream ends, the messages in flight are cancelled (`cancel_in_flight`) or finished, then
    `on_close` runs, shielded from a second cancellation."""
    replies: asyncio.Queue[Reply | BaseException | None] = asyncio.Queue()
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    in_flight: dict[int, asyncio.Task[None]] = {}

    def refuse(request: Request, error: EgbeError) -> Reply:
        return reply_type(message_id=request.message_id, status=message_status(error))

    async def serve_one(request: Request) -> None:
        try:
            reply = await answer(request)
        except EgbeError as error:
            reply = refuse(request, error)
        except Exception as error:  # a bug: the stream ends with it, as a unary call would
            replies.put_nowait(error)
            return
        finally:
            del in_flight[request.message_id]
            slots.release()
        replies.put_nowait(reply)

    async def read() -> None:
        try:
            async for request in requests:
                await slots.acquire()
                if request.message_id in in_flight:
                    slots.release()
                    replies.put_nowait(refuse(request, _DUPLICATE))
                    continue
                in_flight[request.message_id] = asyncio.create_task(serve_one(request))
            while in_flight:  # the client is done writing: answer what it sent, then end
                await asyncio.wait(list(in_flight.values()))
        except Exception as error:  # e.g. undecodable bytes: no message id to answer, the stream ends
            replies.put_nowait(error)
        replies.put_nowait(None)

    async def close(reader: asyncio.Task[None]) -> None:
        reader.cancel()
        if cancel_in_flight:
            for task in in_flight.values():
                task.cancel()
        await asyncio.gather(reader, *in_flight.values(), return_exceptions=True)
        if on_close is not None:
            await on_close()

    reader = asyncio.create_task(read())
    try:
        while (item := await replies.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        await asyncio.shield(close(reader))


class StreamRuns:
    """The runs an AdmitStream admitted and has not ended; when the stream ends they end as cancelled,
    through the same ending (ledger reconciled, reservation released) as EndRun."""

    def __init__(self, gateway: CognitionGateway) -> None:
        self._gateway = gateway
        self._open: set[str] = set()

    def admitted(self, run_id: str) -> None:
        self._open.add(run_id)

    def ended(self, run_id: str) -> None:
        self._open.discard(run_id)

    async def end_all(self) -> None:
        """End every run still open, MAX_IN_FLIGHT at a time; a store that is down leaves the rest to
        the sweep (their deadline), as it does for a unary caller that never ended its runs."""
        left = sorted(self._open)
        self._open.clear()
        for start in range(0, len(left), MAX_IN_FLIGHT):
            await asyncio.gather(*(self._cancel(run_id) for run_id in left[start : start + MAX_IN_FLIGHT]))

    async def _cancel(self, run_id: str) -> None:
        try:
            await self._gateway.end_run(run_id, RunStatus.CANCELLED, detail=STREAM_ENDED)
        except Exception as exc:
            log.warning("run not ended after its stream ended", run_id=run_id, error=str(exc))
