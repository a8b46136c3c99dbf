"""Provider-error classes: which failures are transient (retried with backoff) and which end the call."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from services.errors import EgbeError, FailedPrecondition, InvalidArgument, ResourceExhausted, Unavailable


class ProviderErrorClass(StrEnum):
    AUTHENTICATION = "authentication"
    PERMISSION = "permission"
    BILLING = "billing"  # a spend limit or billing problem: never retried
    INVALID_REQUEST = "invalid_request"
    REQUEST_TOO_LARGE = "request_too_large"
    NOT_FOUND = "not_found"
    RATE_LIMIT = "rate_limit"
    OVERLOADED = "overloaded"
    API_ERROR = "api_error"
    TIMEOUT = "timeout"
    NETWORK = "network"
    UNKNOWN = "unknown"
    # Never sent: the provider's rate limit had no turn for the call before its deadline (`rate_limits`).
    DEFERRED = "deferred"


TRANSIENT = frozenset(
    {
        ProviderErrorClass.RATE_LIMIT,
        ProviderErrorClass.OVERLOADED,
        ProviderErrorClass.API_ERROR,
        ProviderErrorClass.TIMEOUT,
        ProviderErrorClass.NETWORK,
        # (the next provider of the route may have a turn)
        ProviderErrorClass.DEFERRED,
    }
)


@dataclass(frozen=True)
class ProviderAttempt:
    """One provider of a class's route tried for a call: its model, its attempts, and the error class
    that ended them ('' for the provider that answered)."""

    provider: str
    model_id: str
    attempts: int
    error_class: str = ""


class ProviderError(Exception):
    """A classified failure of one provider attempt (`providers_tried`: with a providers table, every
    provider the call was tried on, in order, this error's last)."""

    def __init__(
        self,
        error_class: ProviderErrorClass,
        message: str,
        *,
        status: int | None = None,
        retry_after_seconds: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{error_class.value}: {message}")
        self.error_class = error_class
        self.status = status
        self.retry_after_seconds = retry_after_seconds
        self.attempts = attempts
        self.providers_tried: tuple[ProviderAttempt, ...] = ()

    @property
    def transient(self) -> bool:
        return self.error_class in TRANSIENT


def to_gateway_error(error: ProviderError) -> EgbeError:
    """The status a caller sees once our retry loop gave up or the error was terminal."""
    metadata = {"provider_error_class": error.error_class.value, "attempts": str(error.attempts)}
    message = f"model provider failed after {error.attempts} attempt(s): {error}"
    if error.error_class is ProviderErrorClass.BILLING:
        return ResourceExhausted(message, metadata=metadata)
    if error.error_class in {ProviderErrorClass.INVALID_REQUEST, ProviderErrorClass.REQUEST_TOO_LARGE}:
        return InvalidArgument.field("prompt", message)
    if error.transient:
        return Unavailable(message, metadata=metadata)
    return FailedPrecondition(message, metadata=metadata)
