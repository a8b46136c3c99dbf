"""BiographyService over gRPC: validate, call the store, map errors."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from biography_service import identity_wire, wire
from biography_service.errors import (
    BiographyError,
    ConstraintConflict,
    CorruptEvent,
    EventIdConflict,
    StateLossDetected,
    StorageUnavailable,
    WrongExpectedVersion,
)
from biography_service.service import Biography
from egbe.v1 import biography_pb2, biography_pb2_grpc
from services.auth import Role
from services.errors import Aborted, AlreadyExists, EgbeError, FailedPrecondition, Unavailable
from services.grpc_types import Context
from services.logging import bind_context
from services.metrics import Counters, Histograms

_WRITERS = frozenset({Role.SERVICE})
_READERS = frozenset({Role.SERVICE, Role.OPERATOR})
# The kernel registers identities on a world's behalf; a world may also register its Ori directly.
_IDENTITY_WRITERS = frozenset({Role.SERVICE, Role.WORLD})

METHOD_ROLES = {
    biography_pb2.DESCRIPTOR.services_by_name["BiographyService"].full_name: {
        "Append": _WRITERS,
        "Consolidate": _WRITERS,
        "Read": _READERS,
        "Subscribe": _READERS,
        "Rehydrate": _READERS,
        "VerifyChain": _READERS,
        "RegisterIdentities": _IDENTITY_WRITERS,
    }
}


def status_error(error: BiographyError) -> EgbeError:
    """The one mapping from the biography's domain errors to gRPC statuses."""
    message = str(error)
    if isinstance(error, WrongExpectedVersion):
        actual = "no_stream" if error.actual is None else str(error.actual)
        return Aborted(message, metadata={"ori_id": error.ori_id, "actual_version": actual})
    if isinstance(error, EventIdConflict):
        return AlreadyExists(message, metadata={"event_id": error.event_id})
    if isinstance(error, StateLossDetected):
        return FailedPrecondition(message, metadata={"missing_fragment_ids": ",".join(error.missing)})
    if isinstance(error, CorruptEvent):
        where = {"ori_id": error.ori_id, "stream_version": str(error.stream_version)}
        return FailedPrecondition(message, metadata=where)
    plain: dict[type[BiographyError], type[EgbeError]] = {
        ConstraintConflict: Aborted,
        StorageUnavailable: Unavailable,
    }
    return plain.get(type(error), EgbeError)(message)


@contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except BiographyError as error:
        raise status_error(error) from error


APPEND_SIZE_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
APPEND_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class BiographyServicer(biography_pb2_grpc.BiographyServiceServicer):
    def __init__(self, biography: Biography) -> None:
        self._biography = biography
        self._config = biography.config
        # Scraped on the biography's metrics endpoint: appends, their size and their commit time.
        self.appended = Counters(
            {"egbe_biography_events_appended": ("Events appended (a repeat of a recorded one excluded)", ())}
        )
        self.append_sizes = Histograms(
            "egbe_biography_append_events", "Events per Append request", (), APPEND_SIZE_BUCKETS
        )
        self.append_seconds = Histograms(
            "egbe_biography_append_seconds", "An Append's commit, fsync included", (), APPEND_SECONDS_BUCKETS
        )

    async def Append(
        self, request: biography_pb2.AppendRequest, context: Context
    ) -> biography_pb2.AppendResponse:
        expected, events = wire.append_request(request, self._config)
        bind_context(ori=request.ori_id)
        started = time.perf_counter()
        with _mapped():
            result = await self._biography.append(request.ori_id, expected, events)
        self.append_seconds.observe(time.perf_counter() - started)
        self.append_sizes.observe(len(events))
        if not result.already_recorded:
            self.appended.add("egbe_biography_events_appended", amount=len(events))
        return biography_pb2.AppendResponse(
            next_expected_version=result.last_version,
            first_global_position=result.first_global_position,
            last_global_position=result.last_global_position,
            already_recorded=result.already_recorded,
        )

    async def Read(self, request: biography_pb2.ReadRequest, context: Context) -> biography_pb2.ReadResponse:
        cursor = wire.read_request(request, self._config)
        with _mapped():
            page = await self._biography.read(
                cursor.ori_id, cursor.start, cursor.page_size, backward=cursor.backward
            )
        return wire.read_response(page.events, cursor, page.next_from, self._config.max_page_bytes)

    async def Subscribe(
        self, request: biography_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[biography_pb2.SubscribeResponse]:
        from_position, ori_ids = wire.subscribe_request(request, self._config)
        with _mapped():
            async for event, live in self._biography.subscribe(from_position, ori_ids):
                yield biography_pb2.SubscribeResponse(event=wire.event_message(event), live=live)

    async def Rehydrate(
        self, request: biography_pb2.RehydrateRequest, context: Context
    ) -> biography_pb2.RehydrateResponse:
        budget = wire.rehydrate_request(request, self._config)
        with _mapped():
            working = await self._biography.rehydrate(request.ori_id, budget)
        return wire.rehydrate_response(working)

    async def Consolidate(
        self, request: biography_pb2.ConsolidateRequest, context: Context
    ) -> biography_pb2.ConsolidateResponse:
        fragments = wire.consolidate_request(request, self._config)
        with _mapped():
            done = await self._biography.consolidate(request.ori_id, fragments, request.request_id)
        return biography_pb2.ConsolidateResponse(
            events=[wire.event_message(e) for e in done.events],
            no_state_loss=done.report.no_state_loss,
            missing_fragment_ids=done.report.missing_fragment_ids,
        )

    async def VerifyChain(
        self, request: biography_pb2.VerifyChainRequest, context: Context
    ) -> biography_pb2.VerifyChainResponse:
        ori_id = wire.verify_request(request, self._config)
        with _mapped():
            report = await self._biography.verify_chain(ori_id)
        return biography_pb2.VerifyChainResponse(
            intact=report.intact,
            events_checked=report.events_checked,
            first_broken_version=report.first_broken_version or 0,
            detail=report.detail,
        )

    async def RegisterIdentities(
        self, request: biography_pb2.RegisterIdentitiesRequest, context: Context
    ) -> biography_pb2.RegisterIdentitiesResponse:
        registrations = identity_wire.register_identities_request(request, self._config)
        with _mapped():
            recorded = await self._biography.register_identities(registrations)
        return identity_wire.register_identities_response(recorded)
