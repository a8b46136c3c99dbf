"""What `egbe ops` prints and parses: answers as JSON a person can read (numbers as numbers, money in
dollars), listings a JSON line an item, and durations such as `10m`.

Protobuf's JSON mapping writes 64-bit integers as strings and the gateway counts money in micro-USD; a
person reading `"consumed_micro_usd": "1234"` has to do both conversions in their head.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TextIO, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_MICRO_USD = "micro_usd"
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
_DURATION = re.compile(r"(\d+)([smhd])")
# The most pages a listing follows: a server that always answers another token cannot keep the CLI going.
MAX_PAGES = 1_000_000


class Page(Protocol):
    @property
    def next_page_token(self) -> str: ...


PageT = TypeVar("PageT", bound=Page)


def plain(message: Message) -> dict[str, Any]:
    """The message as protobuf JSON (field names as declared, unset fields included), with 64-bit
    integers as numbers and every `*micro_usd` field as `*usd` in dollars."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers(data, message.DESCRIPTOR)


def _numbers(data: dict[str, Any], descriptor: Any) -> dict[str, Any]:
    if descriptor.full_name.startswith("google.protobuf."):  # (Timestamp, Struct...: their own JSON)
        return data
    return dict(_field(key, value, descriptor.fields_by_name.get(key)) for key, value in data.items())


def _field(key: str, value: Any, field: FieldDescriptor | None) -> tuple[str, Any]:
    kind = None if field is None else field.message_type
    if kind is not None and not kind.GetOptions().map_entry:
        value = [_numbers(v, kind) for v in value] if isinstance(value, list) else _numbers(value, kind)
    elif field is not None and field.type in _INT64:
        value = [int(v) for v in value] if isinstance(value, list) else int(value)
    if key.endswith(_MICRO_USD) and isinstance(value, int):
        return key.removesuffix(_MICRO_USD) + "usd", dollars(value)
    return key, value


async def print_pages(
    fetch: Callable[[str], Awaitable[PageT]],
    items: Callable[[PageT], Iterable[Message]],
    output: TextIO | None = None,
) -> None:
    """Every item of a paged listing, a JSON line each (`output`, default stdout): `fetch(token)` asks for
    a page, `items` reads its items, until a page answers no next token."""
    token = ""
    for _ in range(MAX_PAGES):
        page = await fetch(token)
        for item in items(page):
            print(json.dumps(plain(item)), file=output)
        token = page.next_page_token
        if not token:
            return


def dollars(micro_usd: int) -> float:
    return round(micro_usd / 1_000_000, 6)


def duration_seconds(text: str) -> int:
    """`90s`, `10m`, `2h`, `1d` or a sum of them (`1h30m`), in seconds; for argparse `type=`."""
    parts = _DURATION.findall(text)
    if (
        not parts
        or "".join(f"{n}{u}" for n, u in parts) != text
        or not (seconds := sum(int(n) * _UNITS[u] for n, u in parts))
    ):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 10m, 2h, 1d or 1h30m")
    return seconds


def count(text: str) -> int:
    """A whole number >= 0, for argparse `type=` (the gateway checks each field's own range)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)
