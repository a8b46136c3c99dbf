"""Varint length-delimited protobuf frames: the format of the kernel's tick log and the world's result log."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from google.protobuf.message import DecodeError, Message

M = TypeVar("M", bound=Message)
MAX_VARINT_BYTES = 10
COMPRESS_LEVEL = 1  # fast; TickResults of one run repeat so much that level 1 takes them to ~5%


class FrameError(ValueError):
    """A framed log that is truncated or corrupted; the message names the file and the frame."""


def write_frame(stream: BinaryIO, message: Message, *, compress: bool = False) -> None:
    """One frame; `compress` deflates the message (the world's result log: a game-hour is mostly repeats)."""
    data = message.SerializeToString(deterministic=True)
    if compress:
        data = zlib.compress(data, COMPRESS_LEVEL)
    length = len(data)
    prefix = bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        prefix.append(byte | (0x80 if length else 0))
        if not length:
            break
    stream.write(bytes(prefix))
    stream.write(data)


def _read_length(stream: BinaryIO, path: Path, index: int) -> int | None:
    value = 0
    for shift_index in range(MAX_VARINT_BYTES):
        raw = stream.read(1)
        if not raw:
            if shift_index:
                raise FrameError(f"{path}: frame {index} ends inside its length prefix (truncated)")
            return None
        value |= (raw[0] & 0x7F) << (7 * shift_index)
        if not raw[0] & 0x80:
            return value
    raise FrameError(f"{path}: frame {index} has no valid length prefix (corrupted)")


def raw_frames(path: Path) -> Iterator[bytes]:
    """The bytes of every frame in order; a truncated frame raises FrameError naming it."""
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise FrameError(f"{path}: unreadable: {exc}") from exc
    with stream:
        index = 0
        while (length := _read_length(stream, path, index)) is not None:
            data = stream.read(length)
            if len(data) != length:
                raise FrameError(f"{path}: frame {index} is truncated ({len(data)} of {length} bytes)")
            yield data
            index += 1


def read_frames(path: Path, message_type: type[M], *, compressed: bool = False) -> Iterator[M]:
    """Every frame decoded; an undecodable frame raises FrameError naming it."""
    for index, data in enumerate(raw_frames(path)):
        try:
            yield message_type.FromString(zlib.decompress(data) if compressed else data)
        except (DecodeError, zlib.error) as exc:
            raise FrameError(f"{path}: frame {index} is not a {message_type.__name__}: {exc}") from exc
