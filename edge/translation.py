"""Protobuf's canonical JSON mapping both ways, by the message's descriptor, and a refused call's
google.rpc.Status as JSON: the one place the edge turns bytes into messages and back.

A request that is not JSON, not an object, or names a field its message lacks is refused whole as
INVALID_ARGUMENT naming the field, before anything is forwarded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, cast

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from services.errors import InvalidArgument

# The detail types a status carries, in the descriptor pool before any status is printed as JSON.
DETAIL_TYPES = (error_details_pb2.BadRequest, error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo)

# How json_format names where it failed: "has no field named "x" at "Root.a[0].b"", "... at Root.a.b.",
# and a chain of "Failed to parse <field> field: " prefixes otherwise.
_NO_FIELD = re.compile(r'no field named "([^"]+)" at "([^"]+)"')
_AT_PATH = re.compile(r" at ([A-Za-z_][\w.\[\]]*?)\.+$")
_PARSING = re.compile(r"Failed to parse (\S+) field: ")


def _relative(path: str) -> str:
    """`RegisterAgentsRequest.agents[0].ori` -> `agents[0].ori` (the request's own fields)."""
    return path.partition(".")[2]


def _violation(error: json_format.ParseError) -> tuple[str, str]:
    """The field a json_format refusal is about, and what is wrong with it."""
    text = str(error)
    description = _PARSING.split(text)[-1].strip().rstrip(".") or text
    if match := _NO_FIELD.search(text):
        where = _relative(match.group(2))
        field = f"{where}.{match.group(1)}" if where else match.group(1)
        return field, f"is not a field of this message (unknown field {match.group(1)!r})"
    if match := _AT_PATH.search(text):
        return _relative(match.group(1)) or "request", _AT_PATH.sub("", description)
    named = _PARSING.findall(text)
    return (".".join(named) if named else "request"), description


def parse_json(raw: bytes | str, message_class: type[Message]) -> Message:
    """The request a JSON text spells in the canonical mapping; unknown fields are refused."""
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument.field("request", f"is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgument.field(
            "request", f"must be a JSON object ({message_class.DESCRIPTOR.full_name})"
        )
    message = message_class()
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as exc:
        field, description = _violation(exc)
        raise InvalidArgument.field(field, description) from None
    return message


def to_json(message: Message) -> str:
    """The canonical JSON mapping, compact: lowerCamelCase names, 64-bit integers as strings."""
    return json_format.MessageToJson(message, indent=None)


def status_of(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The google.rpc.Status a service answered with, details included; a status the transport made
    (no details: an unreachable service, a deadline) keeps its code and message."""
    trailing = cast(Iterable[tuple[str, str | bytes]], error.trailing_metadata() or ())
    for key, value in trailing:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return status_pb2.Status(code=error.code().value[0], message=error.details() or "")


def status_document(status: status_pb2.Status) -> dict[str, Any]:
    """The status as JSON (code as a number, details with their "@type"), always with code and message."""
    document = json_format.MessageToDict(status)
    document.setdefault("code", 0)
    document.setdefault("message", "")
    return document


# google.rpc.Code -> HTTP status, as Google's APIs map them (google/rpc/code.proto).
HTTP_STATUS = {
    0: 200,
    1: 499,
    2: 500,
    3: 400,
    4: 504,
    5: 404,
    6: 409,
    7: 403,
    8: 429,
    9: 400,
    10: 409,
    11: 400,
    12: 501,
    13: 500,
    14: 503,
    15: 500,
    16: 401,
}
