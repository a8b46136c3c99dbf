"""What idling costs the next piece of work: the same gateway CPU work timed back to back, right after
the event loop slept, and right after it spun for as long.

Prints one JSON object. The work is a fused run's CPU-bound part without I/O, on the gateway's own code:
the benchmark's RunRequest parsed from its bytes and validated (`gateway.wire.model_request`), the offline
adapter's reply, and the RunResponse built and serialized. It is timed, on uvloop, in rounds that
alternate the ways (so each spell of the machine is shared by all of them):

- `back_to_back`: one unit after another, nothing between them (the baseline);
- `after_sleep_<ms>_ms`: the loop sleeps (`asyncio.sleep`) that long before each unit: the process's
  thread blocks and, with nothing else to run, its CPU idles;
- `after_spin_<ms>_ms`: the thread spins on the clock that long instead: the same gap, the CPU never idle.

A spin that costs the next unit as much as a sleep says the gap itself is dear, not the idling: the
unit's code and data leave the caches while it does not run (on a virtual machine, to whatever else
shares the physical core); a sleep that costs more than the spin adds what a halted vCPU pays to come
back. `ratio_to_back_to_back` is each way's p50 over the baseline's. `cpuidle` records the guest's idle
governor and halt-polling setting where the kernel shows them (a platform setting, read, never changed).
The gateway's benchmark runs its fused runs a few milliseconds apart (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

from bench.gateway_overhead import _percentile, _run_request
from egbe.v1 import gateway_pb2
from gateway import wire as gateway_wire
from gateway.adapters.offline import OfflineAdapter
from services.runtime import run_event_loop

GAPS_MS = (0.2, 1.0, 2.0, 5.0)
SPIN_MS = 2.0
WARM_UP = 200
CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")
HALT_POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


async def unit(adapter: OfflineAdapter, wire: bytes) -> None:
    """One fused run's CPU work, no I/O: parse, validate, the offline reply, the answer serialized."""
    request = gateway_pb2.RunRequest.FromString(wire)
    # (the gateway bounds the output by the run's budget, as here)
    model_request = dataclasses.replace(gateway_wire.model_request(request.generate), max_output_tokens=4_000)
    await adapter.count_input_tokens(model_request)
    reply = await adapter.generate(model_request)
    gateway_pb2.RunResponse(
        outcome=gateway_pb2.RUN_OUTCOME_COMPLETED,
        generation=gateway_pb2.GenerateResponse(text=reply.text, model_ref=adapter.name, offline=True),
    ).SerializeToString()


def _spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


async def _timed_units(
    adapter: OfflineAdapter, wire: bytes, count: int, way: str, gap_s: float
) -> list[float]:
    timings = []
    for _ in range(count):
        if way == "sleep":
            await asyncio.sleep(gap_s)
        elif way == "spin":
            _spin(gap_s)
        started = time.perf_counter()
        await unit(adapter, wire)
        timings.append(time.perf_counter() - started)
    return timings


def _p50_us(values: list[float]) -> float:
    return round(_percentile(values, 0.5) * 1e6, 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


async def measure(rounds: int, per_round: int) -> dict[str, object]:
    adapter = OfflineAdapter()
    wire = _run_request("ori-1").SerializeToString()
    await _timed_units(adapter, wire, WARM_UP, "back_to_back", 0.0)
    ways = {"back_to_back": ("back_to_back", 0.0)}
    ways |= {f"after_sleep_{gap:g}_ms": ("sleep", gap / 1000) for gap in GAPS_MS}
    ways[f"after_spin_{SPIN_MS:g}_ms"] = ("spin", SPIN_MS / 1000)
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, (way, gap_s) in ways.items():
            timings[name] += await _timed_units(adapter, wire, per_round, way, gap_s)
    p50 = {name: _p50_us(values) for name, values in timings.items()}
    return {
        "benchmark": "idle_penalty",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "units_per_way": rounds * per_round,
        "p50_us": p50,
        "ratio_to_back_to_back": {name: round(value / p50["back_to_back"], 2) for name, value in p50.items()},
        "cpuidle": {
            "driver": _read(CPUIDLE / "current_driver"),
            "governor": _read(CPUIDLE / "current_governor_ro") or _read(CPUIDLE / "current_governor"),
            "guest_halt_poll_ns": _read(HALT_POLL_NS),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object (the only output form)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=250, help="units per way in each round")
    args = parser.parse_args()
    print(json.dumps(run_event_loop(measure(args.rounds, args.per_round))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
