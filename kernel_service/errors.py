"""The kernel's domain errors; `status_error` maps each to a gRPC status in one place.

Malformed requests are refused where they are decoded, with the chassis's InvalidArgument naming
the field; these are the refusals the kernel's own state or its biography and policy peers decide.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from services.errors import (
    EgbeError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    Unavailable,
)


class KernelError(Exception):
    """Base of every error the kernel's domain raises."""


class UnknownAgent(KernelError):
    """A slot or Ori id names no registered agent; `field` is the request field that carried it."""

    def __init__(self, message: str, field: str, description: str) -> None:
        self.field = field
        self.description = description
        super().__init__(message)


class PeerNotConfigured(KernelError):
    """A request needs a peer whose target is not configured; `field` carried what it would judge or
    record, `missing` says which peer; nothing was changed."""

    def __init__(self, message: str, field: str, missing: str) -> None:
        self.field = field
        self.missing = missing
        super().__init__(message)


class NoBiography(PeerNotConfigured):
    """Identities arrived but no biography is configured to record them; nothing was registered."""

    def __init__(self, field: str) -> None:
        super().__init__(
            "identities are recorded in the biography: configure kernel.biography_target",
            field,
            "no biography to record it",
        )


class NoPolicy(PeerNotConfigured):
    """A steward directive arrived but no policy service is configured to judge its words."""

    def __init__(self, field: str) -> None:
        super().__init__(
            "steward directives are judged by the policy service's coercion policy: "
            "configure kernel.policy_target",
            field,
            "no policy to judge it",
        )


class IdentitiesInvalid(KernelError):
    """The biography found identities invalid; its field paths are re-rooted under the request's."""

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        self.violations = list(violations)
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))


class BiographyUnreachable(KernelError):
    """The biography could not be reached; nothing was registered, and a retry is safe."""

    def __init__(self, peer_code: str) -> None:
        self.peer_code = peer_code
        super().__init__(
            f"the biography could not record the identities ({peer_code}); nothing was registered, "
            "and a retry is safe"
        )


class BiographyRefused(KernelError):
    """The biography refused the identities for another reason; nothing was registered."""

    def __init__(self, peer_code: str, details: str) -> None:
        self.peer_code = peer_code
        super().__init__(f"the biography refused the identities: {peer_code}: {details}")


class CoreStateError(KernelError):
    """The C core met state outside the ranges it indexes with and stopped before reading out of
    bounds. Restores and merged results are validated first, so this means a bug, not bad input."""


def status_error(error: KernelError) -> EgbeError:
    """The one mapping from the kernel's domain errors to gRPC statuses."""
    message = str(error)
    if isinstance(error, UnknownAgent):
        return NotFound(message, violations=[FieldViolation(error.field, error.description)])
    if isinstance(error, PeerNotConfigured):
        return FailedPrecondition(message, violations=[FieldViolation(error.field, error.missing)])
    if isinstance(error, IdentitiesInvalid):
        return InvalidArgument(error.violations)
    if isinstance(error, BiographyUnreachable):
        return Unavailable(message, metadata={"peer": "biography", "peer_code": error.peer_code})
    if isinstance(error, BiographyRefused):
        return FailedPrecondition(message)
    return EgbeError(message)


@contextmanager
def mapped() -> Iterator[None]:
    """Raise a KernelError as the status error the servicer answers with."""
    try:
        yield
    except KernelError as error:
        raise status_error(error) from error
