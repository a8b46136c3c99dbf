"""The biography's domain errors; the servicer maps each to a gRPC status in one place."""

from __future__ import annotations


class BiographyError(Exception):
    """Base of every error the store and the domain raise."""


class WrongExpectedVersion(BiographyError):
    """The stream is not at the version the caller expected; nothing was written."""

    def __init__(self, ori_id: str, expected: str, actual: int | None) -> None:
        self.ori_id = ori_id
        self.expected = expected
        self.actual = actual
        shown = "no stream" if actual is None else str(actual)
        super().__init__(f"stream {ori_id!r} expected {expected}, actual version is {shown}")


class EventIdConflict(BiographyError):
    """An event id is already recorded with different content or at a different place; nothing was written."""

    def __init__(self, event_id: str, why: str) -> None:
        self.event_id = event_id
        super().__init__(f"event {event_id}: {why}")


class StorageUnavailable(BiographyError):
    """The database could not be reached or failed; the caller may retry."""


class StateLossDetected(BiographyError):
    """A consolidation would have dropped fragments; nothing was written."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(f"consolidation would drop fragments {missing}")


class ConstraintConflict(BiographyError):
    """The database's uniqueness constraints refused a racing write; nothing was written."""


class CorruptEvent(BiographyError):
    """A stored row no longer decodes as an event (it was altered outside the service)."""

    def __init__(self, ori_id: str, stream_version: int, why: str) -> None:
        self.ori_id = ori_id
        self.stream_version = stream_version
        super().__init__(f"stream {ori_id!r} version {stream_version} is corrupt: {why}")
