"""Who an Ori is: the identity event a registration calls for, decided from the Ori's latest identity.

The first identity is `IdentityRegistered` (version 1), a different one `IdentityChanged` (version + 1),
the same one (equal canonical JSON) nothing. Event ids are UUIDv5 of the Ori, the version and the
canonical identity, and each append expects the stream version the decision was made from: a retried
call writes nothing twice, and two racing registrations cannot both write version 1.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from biography_service.appending import AppendRequest
from biography_service.events import NO_STREAM, AppendResult, EventKind, JsonObject, NewEvent, exact
from biography_service.projections import IDENTITY_VERSION_KEY

IDENTITY_NAMESPACE = uuid.UUID("3d1f6a0e-8c2b-4e57-9b1d-5f0a7c3e2b64")
# Decisions re-made after losing a race (another append to the same stream) before answering ABORTED.
IDENTITY_ATTEMPTS = 5


@dataclass(frozen=True)
class IdentityHead:
    """An existing stream's last version, and its latest identity (None and 0 when none was registered)."""

    stream_version: int
    identity_version: int
    # The identity's canonical JSON (the event payload without "identity_version").
    identity: str | None
    identity_stream_version: int | None


@dataclass(frozen=True)
class Registration:
    """One Ori's identity as registered: the OriIdentity as protobuf JSON and its canonical encoding."""

    ori_id: str
    identity: JsonObject
    canonical: str
    world_tick: int


class Outcome(StrEnum):
    REGISTERED = "registered"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class IdentityRecorded:
    """What a registration came to: the identity version and the stream version of its event."""

    ori_id: str
    identity_version: int
    outcome: Outcome
    stream_version: int


def decide(registration: Registration, head: IdentityHead | None) -> IdentityRecorded | AppendRequest:
    """Nothing to write (unchanged), or the one append that records the identity."""
    if head is not None and head.identity == registration.canonical:
        where = head.identity_stream_version or 0
        return IdentityRecorded(registration.ori_id, head.identity_version, Outcome.UNCHANGED, where)
    version = (head.identity_version if head is not None else 0) + 1
    kind = EventKind.IDENTITY_REGISTERED if version == 1 else EventKind.IDENTITY_CHANGED
    event_id = uuid.uuid5(IDENTITY_NAMESPACE, f"{registration.ori_id}\n{version}\n{registration.canonical}")
    event = NewEvent(
        str(event_id),
        kind,
        {**registration.identity, IDENTITY_VERSION_KEY: version},
        registration.world_tick,
    )
    expected = NO_STREAM if head is None else exact(head.stream_version)
    return AppendRequest(registration.ori_id, expected, [event])


def recorded(append: AppendRequest, result: AppendResult) -> IdentityRecorded:
    """The answer for an identity append that went through; a repeat of a recorded one is unchanged."""
    event = append.events[0]
    if result.already_recorded:
        outcome = Outcome.UNCHANGED
    elif event.kind is EventKind.IDENTITY_REGISTERED:
        outcome = Outcome.REGISTERED
    else:
        outcome = Outcome.CHANGED
    version = int(event.payload[IDENTITY_VERSION_KEY])
    return IdentityRecorded(append.ori_id, version, outcome, result.last_version)
