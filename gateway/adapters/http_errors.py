"""How an HTTP model provider's failed answer is classified: its status, its error body, its retry-after.

The Anthropic and OpenAI SDKs raise the same shapes (a status error with the response and its body, a
timeout, a connection error), so every adapter classifies them here, the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.provider_errors import ProviderError, ProviderErrorClass

# Words of an error's type, code or message that mean a spend limit or billing stop, never retried
# (Anthropic's enforced_spend_limit_reached and credit balance, OpenAI's insufficient_quota).
SPEND_LIMIT_MARKERS = ("spend_limit", "spend limit", "credit balance", "billing", "insufficient_quota")
STATUS_CLASSES = {
    401: ProviderErrorClass.AUTHENTICATION,
    402: ProviderErrorClass.BILLING,
    403: ProviderErrorClass.PERMISSION,
    404: ProviderErrorClass.NOT_FOUND,
    413: ProviderErrorClass.REQUEST_TOO_LARGE,
    429: ProviderErrorClass.RATE_LIMIT,
    # A server with no capacity left: Anthropic's 529, and the 503 vLLM, OpenAI and proxies send.
    503: ProviderErrorClass.OVERLOADED,
    529: ProviderErrorClass.OVERLOADED,
}


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, else retry-after in seconds)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def classify_status(status: int, details: str, message: str, headers: Mapping[str, str]) -> ProviderError:
    """A provider's error answer as a class; `details` is its error type, code and message, lowercased."""
    if status in {400, 429} and any(marker in details for marker in SPEND_LIMIT_MARKERS):
        error_class = ProviderErrorClass.BILLING
    elif status in STATUS_CLASSES:
        error_class = STATUS_CLASSES[status]
    elif status >= 500:
        error_class = ProviderErrorClass.API_ERROR
    elif status in {400, 422}:
        error_class = ProviderErrorClass.INVALID_REQUEST
    else:
        error_class = ProviderErrorClass.UNKNOWN
    return ProviderError(
        error_class, message, status=status, retry_after_seconds=retry_after_seconds(headers)
    )
