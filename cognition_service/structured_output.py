"""Validated structured output: parse against the mode's schema, re-ask with the error, then fall back."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ValidationError

from cognition_service.errors import EmptyReply, ReplyInvalid
from cognition_service.peers import GatewayPort
from cognition_service.zoning import Feedback
from egbe.v1 import gateway_pb2

_THINKING = re.compile(r"<thinking>.*?</thinking>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class AttemptRecord:
    attempt: int
    call_id: str
    model_ref: str
    offline: bool
    text: str
    error: str | None
    input_tokens: int
    output_tokens: int
    model_latency_us: int = 0


@dataclass
class StructuredOutcome:
    """The validated reply (None after the retries ran out) and every attempt made for it."""

    reply: BaseModel | None
    response: gateway_pb2.GenerateResponse | None
    attempts: list[AttemptRecord] = field(default_factory=list)

    @property
    def validation_fallback(self) -> bool:
        return self.reply is None


def extract_json(text: str) -> str:
    """The JSON object in a reply: thinking tags stripped, a code fence preferred, else the outer braces."""
    stripped = _THINKING.sub("", text).strip()
    fenced = _FENCE.search(stripped)
    if fenced:
        return fenced.group(1).strip()
    start, end = stripped.find("{"), stripped.rfind("}")
    return stripped[start : end + 1] if 0 <= start < end else stripped


def parse_reply(text: str, schema: type[BaseModel]) -> BaseModel:
    """Validate a reply; an empty reply or blank utterance fails loud, any other fault is ReplyInvalid."""
    if not text.strip():
        raise EmptyReply("the gateway answered with no text")
    try:
        data = json.loads(extract_json(text))
    except json.JSONDecodeError as error:
        raise ReplyInvalid(f"reply is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise ReplyInvalid(f"reply must be a JSON object, got {type(data).__name__}")
    utterance = data.get("utterance")
    if isinstance(utterance, str) and not utterance.strip():
        raise EmptyReply("the model answered with an empty utterance")
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise ReplyInvalid(str(error)) from error


async def generate_validated(
    gateway: GatewayPort,
    make_request: Callable[[int, Feedback | None], gateway_pb2.GenerateRequest],
    schema: type[BaseModel],
    *,
    max_retries: int,
    calls_allowed: int,
    first_attempt: int = 1,
    feedback: Feedback | None = None,
) -> StructuredOutcome:
    """Ask, validate, and re-ask at most `max_retries` times within `calls_allowed` model calls.

    Gateway errors and empty replies propagate: a broken model path is never papered over.
    """
    outcome = StructuredOutcome(reply=None, response=None)
    for offset in range(min(max_retries + 1, calls_allowed)):
        attempt = first_attempt + offset
        response = await gateway.generate(make_request(attempt, feedback))
        record = functools.partial(
            AttemptRecord,
            attempt,
            response.call_id,
            response.model_ref,
            response.offline,
            response.text,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            model_latency_us=response.model_latency_us,
        )
        try:
            reply = parse_reply(response.text, schema)
        except ReplyInvalid as error:
            outcome.attempts.append(record(error=str(error)))
            feedback = Feedback(
                prior_output=response.text,
                critique=f"The reply failed validation against the output schema; fix exactly this:\n{error}",
            )
            continue
        outcome.attempts.append(record(error=None))
        outcome.reply, outcome.response = reply, response
        return outcome
    return outcome
