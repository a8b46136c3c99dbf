"""Hypothesis strategies for any egbe-protocol message, built from its descriptor (bounded depth)."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

MAX_DEPTH = 3
_F = FieldDescriptor
INTEGER_BOUNDS = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_FIXED64: (0, 2**64 - 1),
}
_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=12))


def _integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    # Edges matter most (0, limits, off-by-one); the middle is sampled too.
    edges = st.sampled_from([low, high, 0, 1, -1] if low < 0 else [low, high, 1, 2**31 - 1])
    return st.one_of(edges, st.integers(low, high))


_PLAIN_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    _F.TYPE_BOOL: st.booleans(),
    _F.TYPE_STRING: st.one_of(
        st.text(max_size=40), st.sampled_from(["", " ", "ori-1", "world-1", "../x", "\x00"])
    ),
    _F.TYPE_BYTES: st.binary(max_size=96),
    _F.TYPE_DOUBLE: st.floats(),
    _F.TYPE_FLOAT: st.floats(width=32),
}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type in INTEGER_BOUNDS:
        return _integers(INTEGER_BOUNDS[field.type])
    if field.type == _F.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-3, 1000))  # open enums take unknown values
    return _PLAIN_SCALARS[field.type]


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == _F.TYPE_MESSAGE:
        return message_strategy(field.message_type, depth + 1)
    return _scalar(field)


def _field_strategy(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == _F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        key = _scalar(field.message_type.fields_by_name["key"])
        value = _value(field.message_type.fields_by_name["value"], depth)
        return st.dictionaries(key, value, max_size=3)
    if field.is_repeated:
        return st.lists(_value(field, depth), max_size=4)
    return _value(field, depth)


def _assign(message: Message, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if field.type == _F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        target.extend(value)
    elif field.type == _F.TYPE_MESSAGE:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def message_strategy(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of this type with any subset of fields set, one member per oneof, nesting bounded."""
    cls = GetMessageClass(descriptor)
    if descriptor.full_name == struct_pb2.Struct.DESCRIPTOR.full_name:
        return st.dictionaries(st.text(max_size=8), _JSON_SCALARS, max_size=3).map(_struct)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    plain = {
        field.name: st.one_of(st.none(), _field_strategy(field, depth))
        for field in descriptor.fields
        if field.containing_oneof is None
    }
    oneofs = {
        oneof.name: st.one_of(
            st.none(), *(st.tuples(st.just(f), _field_strategy(f, depth)) for f in oneof.fields)
        )
        for oneof in descriptor.oneofs
    }

    def build(values: dict[str, Any], chosen: dict[str, Any]) -> Message:
        message = cls()
        for name, value in values.items():
            if value is not None:
                _assign(message, descriptor.fields_by_name[name], value)
        for choice in chosen.values():
            if choice is not None:
                _assign(message, *choice)
        return message

    return st.builds(build, st.fixed_dictionaries(plain), st.fixed_dictionaries(oneofs))
