"""In-process tick latency: apply a full frame to the agent arrays, then one core call (C or numpy).

Prints one JSON object: {"agents", "core", "p50_us", "p99_us", "ns_per_agent", ..., "load_average_1m"}.
The result and protobuf encoding are measured separately ("encode_*"), since a co-located world reads
the arrays.
With `--behavior on` the behaviour layer's 10 Hz step runs between the frame and the core, as in
`Kernel.tick` (in the same core, C or numpy), and its own p50 is reported as "behavior_p50_us".
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from bench.kernel_population import WORLD, frames, registrations
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core

FRAME_VARIANTS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=10_200)
    parser.add_argument("--ticks", type=int, default=500)
    parser.add_argument("--core", choices=["c", "numpy"], default="c")
    parser.add_argument(
        "--behavior",
        choices=["on", "off"],
        default="off",
        help="also step the behaviour layer each tick, as Kernel.tick does (off: the core alone)",
    )
    parser.add_argument(
        "--tick-threads", type=int, default=1, help="kernel.tick_threads (engages from 100,000 agents)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (the only output format)")
    args = parser.parse_args()

    config = KernelConfig()
    layer = PersonalityBehaviorLayer(config.behavior) if args.behavior == "on" else None
    kernel = Kernel(config, select_core(args.core, tick_threads=args.tick_threads), layer)
    kernel.register(WORLD, registrations(args.agents))
    variants = frames(args.agents, FRAME_VARIANTS)
    arrays = kernel.arrays
    warmup = min(50, args.ticks)
    samples, behavior_samples = [], []
    for tick in range(1, args.ticks + warmup + 1):
        frame = variants[tick % FRAME_VARIANTS]
        started = time.perf_counter_ns()
        kernel.core.apply_frame(arrays, None, frame)  # Kernel.tick's apply of a full frame
        stepping = time.perf_counter_ns()
        kernel._step_behavior(tick, 0)  # Kernel.tick's behaviour call site (nothing without a layer)
        stepped = time.perf_counter_ns()
        kernel.core.run(arrays, kernel.core_params, tick=tick, observed_all=True)  # a full frame
        elapsed = time.perf_counter_ns() - started
        if tick > warmup:
            samples.append(elapsed)
            behavior_samples.append(stepped - stepping)
    ns = np.array(samples, dtype=np.float64)
    p50 = float(np.percentile(ns, 50))
    behavior = {"behavior": args.behavior}
    if layer is not None:
        behavior["behavior_p50_us"] = round(float(np.percentile(behavior_samples, 50)) / 1_000, 2)
    print(
        json.dumps(
            {
                "agents": args.agents,
                "core": kernel.core.name,
                "tick_threads": args.tick_threads,
                "p50_us": round(p50 / 1_000, 2),
                "p99_us": round(float(np.percentile(ns, 99)) / 1_000, 2),
                "ns_per_agent": round(p50 / args.agents, 3),
                "ticks": len(samples),
                "clotho": int(arrays.tier_counts[1]),
                "lachesis": int(arrays.tier_counts[2]),
                "atropos": int(arrays.tier_counts[3]),
                **behavior,
                "load_average_1m": round(os.getloadavg()[0], 2),  # other work sharing the cores
            }
        )
    )


if __name__ == "__main__":
    main()
