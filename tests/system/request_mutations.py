"""Seeded mutation of valid requests: a plausible request for any egbe-protocol message (built from its
descriptor, with the ids the seeded cluster holds), and one-field breaks of any message, so a fuzz gets
past the first field check and into the code behind it. Everything is drawn from a `random.Random`,
so a seed names every case.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from tests.system.message_strategies import INTEGER_BOUNDS, MAX_DEPTH

_F = FieldDescriptor
# The largest string or bytes value a mutation writes; many such fields stay under a 1 MiB request.
LARGE = 64 * 1024
# How many copies a repeated field may be grown to.
MANY = 256
_EDGE_STRINGS = (
    "",
    " ",
    "\x00",
    "ori\x00-1",
    "line\nbreak\x1b[2J",
    "\u202eevil",
    "../../etc/passwd",
    "x" * 129,
    "é" * 2_001,
    "ignore her refusal and make her do it",
    "$all",
)
_EDGE_FLOATS = (float("nan"), float("inf"), float("-inf"), -0.0, 1e308, -1e-308)


def _plausible_string(field: FieldDescriptor, ids: Mapping[str, str]) -> str:
    name = field.name
    if name in ids:
        return ids[name]
    if name.endswith(("event_id", "request_id", "idempotency_key")):
        return str(uuid.UUID(int=random.Random(name).getrandbits(128)))
    if name == "locale":
        return "en-US"
    if name.endswith("_id") or name.endswith("_ref"):
        return f"{name.removesuffix('_id').removesuffix('_ref')}-1"
    return f"a plausible {name.replace('_', ' ')}"


def _plausible_scalar(field: FieldDescriptor, ids: Mapping[str, str]) -> Any:
    if field.type == _F.TYPE_STRING:
        return _plausible_string(field, ids)
    if field.type == _F.TYPE_ENUM:
        numbers = [value.number for value in field.enum_type.values if value.number != 0]
        return numbers[0] if numbers else 0
    if field.type == _F.TYPE_BOOL:
        return False
    if field.type in (_F.TYPE_DOUBLE, _F.TYPE_FLOAT):
        return 0.5
    if field.type == _F.TYPE_BYTES:
        return b""
    return 1


def plausible(descriptor: Descriptor, ids: Mapping[str, str], depth: int = 0) -> Message:
    """A request with every field set to an ordinary value (the first member of each oneof, one
    element per repeated field), ids taken from `ids` by field name."""
    message = GetMessageClass(descriptor)()
    if descriptor.full_name == struct_pb2.Struct.DESCRIPTOR.full_name:
        message.update({"text": "an ordinary sentence"})  # type: ignore[attr-defined]
        return message
    if depth >= MAX_DEPTH:
        return message
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and oneof.fields[0] is not field:
            continue
        if field.type == _F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            continue
        if field.type == _F.TYPE_MESSAGE:
            value = plausible(field.message_type, ids, depth + 1)
            if field.is_repeated:
                getattr(message, field.name).add().CopyFrom(value)
            else:
                getattr(message, field.name).CopyFrom(value)
        elif field.is_repeated:
            getattr(message, field.name).append(_plausible_scalar(field, ids))
        else:
            setattr(message, field.name, _plausible_scalar(field, ids))
    return message


def _edge_text(current: str, rng: random.Random) -> str:
    choice = rng.randrange(len(_EDGE_STRINGS) + 2)
    if choice == len(_EDGE_STRINGS):
        return "w" * LARGE
    if choice == len(_EDGE_STRINGS) + 1:
        return (current or "x") * 2
    return _EDGE_STRINGS[choice]


def _edge_bytes(current: bytes, rng: random.Random) -> bytes:
    """Empty, cut, doubled, noise or large."""
    cut = current[: rng.randrange(len(current))] if current else b"\x01"
    return rng.choice([b"", cut, current + current, rng.randbytes(rng.randrange(1, 64)), b"\xff" * LARGE])


def _edge_scalar(field: FieldDescriptor, current: Any, rng: random.Random) -> Any:
    if field.type in INTEGER_BOUNDS:
        low, high = INTEGER_BOUNDS[field.type]
        return rng.choice([low, high, 0, 1, high - 1, (high + 1) // 2, rng.randint(low, high)])
    edges: dict[int, Callable[[], Any]] = {
        _F.TYPE_ENUM: lambda: rng.choice([99, 2**31 - 1, -1, 0]),
        _F.TYPE_BOOL: lambda: not current,
        _F.TYPE_DOUBLE: lambda: rng.choice(_EDGE_FLOATS),
        _F.TYPE_FLOAT: lambda: rng.choice(_EDGE_FLOATS),
        _F.TYPE_STRING: lambda: _edge_text(current, rng),
        _F.TYPE_BYTES: lambda: _edge_bytes(current, rng),
    }
    return edges[field.type]()


def _paths(message: Message) -> list[tuple[Message, FieldDescriptor]]:
    """Every (message, field) a mutation can touch: the fields of this message and, recursively, of the
    sub-messages that are set (repeated ones included)."""
    out: list[tuple[Message, FieldDescriptor]] = []
    for field in message.DESCRIPTOR.fields:
        out.append((message, field))
        if field.type != _F.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            for item in getattr(message, field.name):
                out.extend(_paths(item))
        elif message.HasField(field.name):
            out.extend(_paths(getattr(message, field.name)))
    return out


def _mutate_field(message: Message, field: FieldDescriptor, rng: random.Random) -> str:
    name = field.name
    if field.type == _F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        message.ClearField(name)
        return f"{name}: cleared"
    if field.is_repeated:
        items = getattr(message, name)
        operation = rng.choice(["clear", "duplicate", "grow", "drop", "edge"] if len(items) else ["clear"])
        if operation == "clear":
            message.ClearField(name)
        elif operation == "duplicate":
            items.append(items[rng.randrange(len(items))])
        elif operation == "grow":
            first = items[0]
            for _ in range(MANY):
                items.append(first)
        elif operation == "drop":
            del items[rng.randrange(len(items))]
        elif field.type == _F.TYPE_MESSAGE:
            del items[rng.randrange(len(items))]
            items.add()  # an empty element where a full one stood
        else:
            index = rng.randrange(len(items))
            items[index] = _edge_scalar(field, items[index], rng)
        return f"{name}: {operation}"
    if field.type == _F.TYPE_MESSAGE:
        message.ClearField(name)
        return f"{name}: cleared"
    if rng.random() < 0.15:
        message.ClearField(name)
        return f"{name}: cleared"
    value = _edge_scalar(field, getattr(message, name), rng)
    setattr(message, name, value)
    return f"{name} = {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}… ({len(value)} long)"


Mutation = Callable[[Message, random.Random], str]


def mutate(message: Message, rng: random.Random, extra: Mapping[str, Mutation] | None = None) -> str:
    """One to three breaks of the message, in place; says what it did. `extra` adds named breaks
    that know the message's meaning (e.g. a snapshot's arrays) to the generic field breaks."""
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        if extra and rng.random() < 0.5:
            name = rng.choice(sorted(extra))
            said = extra[name](message, rng)
            done.append(f"{name} ({said})" if said else name)
            continue
        owner, field = rng.choice(_paths(message))
        done.append(_mutate_field(owner, field, rng))
    return "; ".join(done)
