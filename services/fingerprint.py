"""Stable FNV-1a 64-bit fingerprints over canonical JSON: how configs, requests and runs are named."""

from __future__ import annotations

import json
from typing import Any

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> str:
    """16 lowercase hex digits."""
    value = FNV64_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV64_PRIME) & MASK64
    return f"{value:016x}"


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: equal values always encode equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(value: Any) -> str:
    return fnv1a64(canonical_json(value))
