"""FNV-1a 64 over canonical JSON: how a run names the scenario and configuration it ran under."""

from __future__ import annotations

import json

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> str:
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & _MASK64
    return f"{value:016x}"


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal documents give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(value: object) -> str:
    return fnv1a64(canonical_json(value))
