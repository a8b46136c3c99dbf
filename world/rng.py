"""Seeded draw streams keyed by (seed, tick, ori, purpose): one Ori's fate never moves another's dice.

Two views of the same keying. `stream` gives a numpy Generator over Philox whose 128-bit key is a
BLAKE2b digest of the key tuple, for the rare draws that need a distribution. `uniform` hashes the key
tuple for a whole population at once (SplitMix64 finalisation in numpy), for per-tick draws in large
worlds, where building one Generator per Ori per tick would cost more than the world itself.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _digest(*parts: int | str) -> bytes:
    h = hashlib.blake2b(digest_size=16, person=b"egbe-world-rng")
    for part in parts:
        encoded = part.encode() if isinstance(part, str) else part.to_bytes(8, "little", signed=False)
        h.update(len(encoded).to_bytes(2, "little"))
        h.update(encoded)
    return h.digest()


def stream(seed: int, tick: int, ori: str, purpose: str) -> np.random.Generator:
    """A fresh generator for one (seed, tick, ori, purpose); the same key always draws the same values."""
    key = np.frombuffer(_digest(seed & _MASK64, tick & _MASK64, ori, purpose), dtype="<u8")
    return np.random.Generator(np.random.Philox(key=key))


def ori_key(ori_id: str) -> int:
    """A stable 64-bit key for an Ori id, so vectorised draws key on the id, never on the slot."""
    return int.from_bytes(_digest(ori_id)[:8], "little")


def purpose_key(seed: int, purpose: str) -> int:
    return int.from_bytes(_digest(seed & _MASK64, purpose)[:8], "little")


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def uniform(seed: int, tick: int, ori_keys: npt.NDArray[np.uint64], purpose: str) -> npt.NDArray[np.float64]:
    """One uniform draw in [0, 1) per Ori for this tick and purpose; each depends only on its own key."""
    tick_key = np.array([purpose_key(seed, purpose)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        tick_key = _mix(tick_key ^ (np.uint64(tick & _MASK64) * _GOLDEN))
        x = _mix(tick_key ^ ori_keys)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
