"""The control check every admission and model/tool boundary makes (`InFlight.blocking`), as active
controls pile up: an operator may kill thousands of Ori one by one.

Prints one JSON object: per count of active KillOri controls, the check's cost for a run that no
control stops (the common case, and the worst for a scan) in the gateway's indexed view
(`indexed_us`) and, as the baseline measured in the same run, in a scan of every active control in
arrival order (`scan_us`: what the view did before it was indexed). An admission makes the check
twice (its own, and the in-flight run's).

And per count of runs in flight, the cost of finding the runs a pushed KillOri control stops (one Ori's
run among them): indexed (`InFlight.matching`) against a scan of every run in flight (what a push did
before the runs were indexed). An operator killing N Ori one by one makes N pushes.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable

from gateway.inflight import InFlight
from gateway.records import Control, ControlKind, ControlScope, RunSpec

COUNTS = (0, 1, 100, 10_000)
RUN_COUNTS = (1, 100, 5_000)


def _controls(count: int) -> list[Control]:
    return [
        Control(f"c{n}", ControlKind.KILL, ControlScope.ORI, f"ori-{n}", "runaway", "op", 0)
        for n in range(count)
    ]


def _us_per_call(check: Callable[[], object], repeat: int) -> float:
    """The best of five timings of `repeat` calls, per call (the least disturbed by the machine)."""
    return min(timeit.repeat(check, number=repeat, repeat=5)) / repeat * 1e6


def _compared(indexed: Callable[[], object], scan: Callable[[], object], repeat: int) -> dict[str, float]:
    indexed_us, scan_us = _us_per_call(indexed, repeat), _us_per_call(scan, repeat)
    return {
        "indexed_us": round(indexed_us, 3),
        "scan_us": round(scan_us, 3),
        "speedup": round(scan_us / indexed_us, 1),
    }


def measure(count: int, repeat: int) -> dict[str, float]:
    controls = _controls(count)
    view = InFlight()
    view.replace_controls(controls)
    spec = RunSpec("r1", "tenant", "world", "not-killed", 1, 1, 2, 2, 4_000)

    def scan() -> Control | None:
        return next((c for c in controls if c.matches(spec, 0)), None)

    if view.blocking(spec) is not None or scan() is not None:
        raise RuntimeError("the measured run must be one no control stops")
    return _compared(lambda: view.blocking(spec), scan, repeat)


def measure_push(runs: int, repeat: int) -> dict[str, float]:
    view = InFlight()
    for n in range(runs):
        view.track(RunSpec(f"r{n}", "tenant", "world", f"ori-{n}", 1, 1, 2, 2, 4_000))
    kill = _controls(1)[0]  # KillOri ori-0: one run in flight

    def scan() -> list[object]:
        return [run for run in view.runs.values() if kill.matches(run.spec, 0)]

    if [run.spec.run_id for run in view.matching(kill)] != ["r0"] or len(scan()) != 1:
        raise RuntimeError("the pushed control must name exactly one run in flight")
    return _compared(lambda: view.matching(kill), scan, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--repeat", type=int, default=200, help="checks per timing")
    args = parser.parse_args()
    report = {
        "benchmark": "control_check",
        "active_controls": {str(count): measure(count, args.repeat) for count in COUNTS},
        "push_over_runs_in_flight": {str(count): measure_push(count, args.repeat) for count in RUN_COUNTS},
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
