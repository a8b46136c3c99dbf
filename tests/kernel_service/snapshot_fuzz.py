"""A seeded, time-bounded fuzz of the kernel's ways in for state: snapshots (RestoreSnapshot and the
tick log's snapshot records) and ticks with merged results.

Each case runs a C kernel and a numpy kernel (behaviour layer on) to a real state, snapshots it, and
either randomizes the snapshot within every documented range (both cores must take it and then
answer byte-identically, tick after tick) or breaks it in one way (both must refuse it with
INVALID_ARGUMENT and keep exactly the state they had). Run in-process by test_snapshot_fuzz.py and,
against a core built with AddressSanitizer and UBSan, by test_sanitized_core.py:
`python -m tests.kernel_service.snapshot_fuzz --seed 7 --seconds 20`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.agent_state import AGENT_FIELDS
from kernel_service.behavior.state_checks import RANGES as BEHAVIOR_RANGES
from kernel_service.bounds import MAX_TICK
from kernel_service.kernel import Kernel
from kernel_service.snapshot_checks import AGENT_RANGES, decode_arrays
from kernel_service.tick_log import TickLogWriter, deterministic_digest, read_records
from services.errors import InvalidArgument
from tests.kernel_service.frames import columns, make_kernel

Snapshot = kernel_pb2.KernelSnapshot
Rng = np.random.Generator


@dataclass
class FuzzReport:
    cases: int = 0
    accepted: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)


def _named(name: str, values: np.ndarray) -> kernel_pb2.NamedArray:  # type: ignore[type-arg]
    little = values.astype(values.dtype.newbyteorder("<"), copy=False)
    return kernel_pb2.NamedArray(name=name, dtype=little.dtype.str, data=little.tobytes())


def _random_values(rng: Rng, dtype: np.dtype, size: int, bounds: tuple[int, int] | None) -> np.ndarray:  # type: ignore[type-arg]
    if dtype == np.bool_:
        return rng.integers(0, 2, size).astype(np.bool_)
    info = np.iinfo(dtype)
    low, high = bounds if bounds is not None else (int(info.min), int(info.max))
    wide = np.int64 if low < 0 else np.uint64
    edges = np.array([low, high, (low + high) // 2, max(low, 0)], dtype=wide)
    values = rng.integers(low, high, size, endpoint=True, dtype=wide)
    pick = rng.random(size) < 0.3
    values[pick] = edges[rng.integers(0, len(edges), int(pick.sum()))]
    return values.astype(dtype)


def _replace(arrays: list[kernel_pb2.NamedArray], name: str, values: np.ndarray) -> None:  # type: ignore[type-arg]
    for named in arrays:
        if named.name == name:
            named.CopyFrom(_named(name, values))


def randomized(snapshot: Snapshot, rng: Rng, kernel: Kernel) -> Snapshot:
    """A valid snapshot: arrays refilled at random within every range the checks hold them to."""
    out = Snapshot()
    out.CopyFrom(snapshot)
    agents = len(out.ori_ids)
    for name, dtype in AGENT_FIELDS.items():
        if rng.random() < 0.5:
            _replace(out.arrays, name, _random_values(rng, np.dtype(dtype), agents, AGENT_RANGES.get(name)))
    behavior = decode_arrays(out.behavior_arrays, "behavior_arrays")
    capacity = len(behavior["quirks"])
    for name, values in behavior.items():
        if name in ("quirks", "plan_method", "plan_cursor") or rng.random() < 0.5:
            continue
        _replace(
            out.behavior_arrays,
            name,
            _random_values(rng, values.dtype, len(values), BEHAVIOR_RANGES.get(name)),
        )
    if rng.random() < 0.5 and kernel.behavior is not None:
        lengths = kernel.behavior.methods.length  # type: ignore[attr-defined]
        method = rng.integers(-1, len(lengths), capacity).astype(np.int16)
        steps = np.where(method >= 0, lengths[np.maximum(method, 0)], 1)
        cursor = (rng.random(capacity) * steps).astype(np.int32)
        _replace(out.behavior_arrays, "plan_method", method)
        _replace(out.behavior_arrays, "plan_cursor", cursor)
    out.last_tick = int(rng.choice([out.last_tick, MAX_TICK - 50_000, 0]))
    return out


def _set_array(
    name: str, values: Callable[[np.ndarray], np.ndarray], behavior: bool = False
) -> Callable[[Snapshot, Rng], None]:  # type: ignore[type-arg]
    def mutate(snapshot: Snapshot, rng: Rng) -> None:
        arrays = snapshot.behavior_arrays if behavior else snapshot.arrays
        current = decode_arrays(arrays, "arrays")[name]
        _replace(arrays, name, values(current.copy()))  # type: ignore[arg-type]

    return mutate


def _at_random(value: int) -> Callable[[np.ndarray], np.ndarray]:  # type: ignore[type-arg]
    def change(array: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        array[len(array) // 2] = value
        return array

    return change


def _fragment_payload(snapshot: Snapshot, rng: Rng) -> None:
    for entry in snapshot.pending_fragments:
        if entry.fragments:
            entry.fragments[-1].payload.fields["moment"].string_value = "action"
            entry.fragments[-1].payload.fields["action_kind"].string_value = "ACTION_KIND_NOT_ONE"
            return
    snapshot.pending_fragments.add(slot=10_000)


def _shorten_behavior(snapshot: Snapshot, rng: Rng) -> None:
    """Every behaviour array cut to one row per axis: the layer then holds fewer rows than agents."""
    for named in list(snapshot.behavior_arrays):
        if named.name not in {"traits", "values"}:
            _set_array(named.name, lambda a: a[:1], behavior=True)(snapshot, rng)


# Each breaks a valid snapshot in one way: a restore must refuse it and change nothing.
BREAKS: dict[str, Callable[[Snapshot, Rng], None]] = {
    "tier 200": _set_array("tier", _at_random(200)),
    "tier reason 99": _set_array("tier_reason", _at_random(99)),
    "cached kind 200": _set_array("cached_kind", _at_random(200)),
    "out source 9": _set_array("out_source", _at_random(9)),
    "need over 10000": _set_array("need_social_bp", _at_random(10_001)),
    "negative proximity": _set_array("player_proximity_mm", _at_random(-5)),
    "short tier array": _set_array("tier", lambda a: a[:-1]),
    "wrong dtype": _set_array("cached_priority", lambda a: a.astype(np.uint32)),
    "float array": _set_array("goal_ref", lambda a: a.astype(np.float32)),
    "plan method past library": _set_array("plan_method", _at_random(500), behavior=True),
    "plan method below -1": _set_array("plan_method", _at_random(-7), behavior=True),
    "plan cursor past its steps": _set_array("plan_cursor", _at_random(1_000_000), behavior=True),
    "mood valence int32 max": _set_array("mood_valence", _at_random(2**31 - 1), behavior=True),
    "emotion 99": _set_array("emotion", _at_random(99), behavior=True),
    "tree routine 9": _set_array("tree_routine", _at_random(9), behavior=True),
    "behaviour dtype": _set_array("goal", lambda a: a.astype(np.int64), behavior=True),
    "short behaviour arrays": _shorten_behavior,
    "short tenants": lambda s, r: s.tenant_ids.__delitem__(-1),
    "repeated ori": lambda s, r: s.ori_ids.__setitem__(-1, s.ori_ids[0]),
    "control character id": lambda s, r: s.ori_ids.__setitem__(0, "ori\x00"),
    "tick past 2^63": lambda s, r: setattr(s, "last_tick", MAX_TICK + 1),
    "unknown array": lambda s, r: s.arrays.add().CopyFrom(
        _named("extra", np.zeros(len(s.ori_ids), np.uint8))
    ),
    "bad fragment": _fragment_payload,
}


def _batch(rng: Rng, tick: int, agents: int) -> object:
    flags = (rng.integers(0, 2**8, agents) & rng.integers(0, 2**8, agents)).astype(np.uint16)
    return columns(
        tick,
        signal_flags=flags,
        player_proximity_mm=rng.choice([0, 2_500, 9_999, 2**31 - 1], agents).astype(np.int32),
        addressed_by_player_id=rng.choice([0, 0, 7], agents).astype(np.uint32),
        goal_ref=rng.choice([0, 0, 1, 2**28 + 1, 2**29 + 3], agents).astype(np.uint32),
        need_safety_bp=rng.choice([0, 2_000, 9_000], agents).astype(np.uint16),
        fatigue_bp=rng.choice([0, 7_000, 10_000], agents).astype(np.uint16),
        need_social_bp=rng.choice([0, 8_000], agents).astype(np.uint16),
    )


def _merged(rng: Rng, agents: int) -> list[action_pb2.ActionIntent]:
    return [
        action_pb2.ActionIntent(
            slot=int(rng.integers(0, agents)),
            kind=int(rng.integers(0, 17)),
            goal_ref=int(rng.integers(0, 2**32)),
            priority=int(rng.integers(0, 10_001)),
            plan_step=int(rng.integers(0, 2**16)),
        )
        for _ in range(int(rng.integers(0, 3)))
    ]


def _state(kernel: Kernel) -> bytes:
    return kernel.snapshot().SerializeToString(deterministic=True)


def _through_tick_log(snapshot: Snapshot, kernel: Kernel) -> Snapshot:
    """The snapshot as a tick log records and reads it back (the second way a snapshot comes in)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ticks.log"
        writer = TickLogWriter(path, kernel, snapshot_every_ticks=1_000)
        writer.record_snapshot(snapshot)
        writer.close()
        return next(r.snapshot for r in read_records(path) if r.WhichOneof("entry") == "snapshot")


def run_case(rng: Rng, report: FuzzReport) -> None:
    agents = int(rng.integers(2, 40))  # two at least: one break repeats an Ori
    kernels = [make_kernel(agents, core, behavior=True) for core in ("c", "numpy")]
    tick = int(rng.integers(0, 5))
    for _ in range(int(rng.integers(1, 8))):
        tick += int(rng.choice([1, 1, 2, 1_200]))
        batch, merged = _batch(rng, tick, agents), _merged(rng, agents)
        for kernel in kernels:
            kernel.tick(batch, merged)  # type: ignore[arg-type]
    snapshot = _through_tick_log(kernels[0].snapshot(), kernels[0])
    # Each kernel's own state differs from the snapshot's afterwards (one more tick), so a refused
    # restore that changed anything shows.
    tick += 1
    batch = _batch(rng, tick, agents)
    for kernel in kernels:
        kernel.tick(batch)  # type: ignore[arg-type]
    report.cases += 1
    if rng.random() < 0.5:
        _break(snapshot, rng, kernels, report)
    else:
        _restore_and_compare(snapshot, rng, kernels, report)


def _break(snapshot: Snapshot, rng: Rng, kernels: list[Kernel], report: FuzzReport) -> None:
    """One break of the snapshot: each kernel refuses it and keeps exactly its state."""
    name = str(rng.choice(sorted(BREAKS)))
    broken = Snapshot()
    broken.CopyFrom(snapshot)
    BREAKS[name](broken, rng)
    report.refused += 1
    for kernel in kernels:
        before = _state(kernel)
        try:
            kernel.restore(broken)
        except InvalidArgument:
            pass
        else:
            report.failures.append(f"{name}: {kernel.core.name} took the broken snapshot")
        if _state(kernel) != before:
            report.failures.append(f"{name}: {kernel.core.name} changed on a refused restore")


def _restore_and_compare(snapshot: Snapshot, rng: Rng, kernels: list[Kernel], report: FuzzReport) -> None:
    """A randomized valid snapshot: both cores take it, then answer and hold the same, tick by tick."""
    valid = randomized(snapshot, rng, kernels[0])
    for kernel in kernels:
        try:
            kernel.restore(valid)
        except InvalidArgument as error:
            report.failures.append(f"valid snapshot refused by {kernel.core.name}: {error}")
            return
    report.accepted += 1
    agents = len(valid.ori_ids)
    tick = kernels[0].last_tick or 0
    for step in range(4):
        tick += int(rng.choice([0, 1, 2, 1_200]))
        batch, merged = _batch(rng, tick, agents), _merged(rng, agents)
        digests = [deterministic_digest(kernel.tick(batch, merged)) for kernel in kernels]  # type: ignore[arg-type]
        if digests[0] != digests[1]:
            report.failures.append(f"cores answer differently on tick {step} after a restore")
            return
    if _state(kernels[0]) != _state(kernels[1]):
        report.failures.append("cores hold different states after a restore")


def run(seed: int, seconds: float, max_cases: int) -> FuzzReport:
    rng = np.random.default_rng(seed)
    report = FuzzReport()
    deadline = time.monotonic() + seconds
    while report.cases < max_cases and time.monotonic() < deadline:
        run_case(rng, report)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cases", type=int, default=10_000)
    args = parser.parse_args()
    report = run(args.seed, args.seconds, args.cases)
    for failure in report.failures[:20]:
        print(failure)
    print(f"fuzz: {report.cases} cases, {report.accepted} restored, {report.refused} refused")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
