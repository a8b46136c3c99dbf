"""The first field path where two protobuf messages differ, with both values, as Paracosm's replay reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


@dataclass(frozen=True)
class Divergence:
    path: str
    recorded: str
    fresh: str


def _show(value: object) -> str:
    if isinstance(value, Message):
        return "{" + str(value).strip().replace("\n", "; ") + "}"
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def _repeated(path: str, a: Sequence[Any], b: Sequence[Any], of_messages: bool) -> Divergence | None:
    for i in range(min(len(a), len(b))):
        item = f"{path}[{i}]"
        if of_messages:
            found = first_divergence(a[i], b[i], item)
            if found is not None:
                return found
        elif a[i] != b[i]:
            return Divergence(item, _show(a[i]), _show(b[i]))
    if len(a) == len(b):
        return None
    i = min(len(a), len(b))
    return Divergence(
        f"{path}[{i}]", _show(a[i]) if i < len(a) else "<absent>", _show(b[i]) if i < len(b) else "<absent>"
    )


def _field(field: Any, recorded: Message, fresh: Message, path: str) -> Divergence | None:
    a = getattr(recorded, field.name)
    b = getattr(fresh, field.name)
    is_message = field.type == FieldDescriptor.TYPE_MESSAGE
    if field.is_repeated:
        if is_message and field.message_type.GetOptions().map_entry:
            return None if dict(a) == dict(b) else Divergence(path, _show(dict(a)), _show(dict(b)))
        return _repeated(path, a, b, is_message)
    if is_message:
        return first_divergence(a, b, path)
    return None if a == b else Divergence(path, _show(a), _show(b))


def first_divergence(recorded: Message, fresh: Message, path: str = "") -> Divergence | None:
    """Walks fields in declaration order, depth first; None when the messages are equal."""
    for field in recorded.DESCRIPTOR.fields:
        found = _field(field, recorded, fresh, f"{path}.{field.name}" if path else field.name)
        if found is not None:
            return found
    return None
