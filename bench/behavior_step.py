"""Behaviour-layer speed: stepping 10,000 cached HTN plans and re-evaluating 10,000 personality trees.

The step is the kernel's (`PersonalityBehaviorLayer.step`, one call per tick over the kernel's
arrays: due check, change detection, plan step, fresh-decision mark, arbitration), run in the C core
(`lachesis_step_ns_per_agent`, `bt_eval_ns_per_agent`) and in the numpy fallback (`*_numpy_*`).
`decide_ns_per_agent` is the numpy `decide` alone, which the step figure measured before the step
moved into C; `arbitrate_ns_per_agent` the numpy arbitration alone.

Prints one JSON object. Slots are a scattered half of a 20,000-agent population (the figures the
targets name); the kernel's own strided set (every second slot) and a contiguous run are reported
beside them. The baseline is the scalar reference tree, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from egbe.v1 import common_pb2, kernel_pb2
from kernel_service.agent_state import AgentArrays
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.personality_tree import TreeInputs, evaluate_personality_tree
from kernel_service.behavior.profile import profile_from_registration
from kernel_service.behavior.vocabulary import TRAIT_FIELDS, GoalFamily
from kernel_service.behavior_seam import BehaviorDecisions, BehaviorSignals, decisions_of, signals_of
from services.goal_refs import encode_goal_ref

POPULATION = 20_000
AGENTS = 10_000


def _registrations(rng: np.random.Generator, count: int) -> list[kernel_pb2.AgentRegistration]:
    regs = []
    for _ in range(count):
        traits = kernel_pb2.PersonalityTraits(**{f: int(rng.integers(0, 10_001)) for f in TRAIT_FIELDS})
        domains = rng.choice(np.arange(1, 10), size=4, replace=False)
        values = [
            kernel_pb2.RankedValue(domain=int(d), weight_bp=int(rng.integers(0, 10_001))) for d in domains
        ]
        regs.append(
            kernel_pb2.AgentRegistration(
                traits=traits, values=values, quirks=["hums"], vocation_ref=int(rng.integers(0, 3))
            )
        )
    return regs


def _kernel_arrays(rng: np.random.Generator, layer: PersonalityBehaviorLayer) -> AgentArrays:
    """A kernel population: every agent Lachesis, holding no cognition-made action, with signals."""
    arrays = AgentArrays(POPULATION)
    arrays.add(POPULATION)
    arrays.fields["tier"][:] = common_pb2.COGNITION_TIER_LACHESIS
    for name in ("need_safety_bp", "need_sustaining_bp", "need_social_bp", "need_purpose_bp", "fatigue_bp"):
        arrays.fields[name][:] = rng.integers(0, 6_000, POPULATION)
    station = layer.library.tag_bit("station-known")
    goals = np.array(
        [
            encode_goal_ref(GoalFamily.VOCATION, station, 1),
            encode_goal_ref(GoalFamily.VOCATION, 0, 2),
            encode_goal_ref(GoalFamily.SOCIAL, layer.library.tag_bit("relationship-repair"), 3),
            encode_goal_ref(GoalFamily.TRAVEL, layer.library.tag_bit("route-known"), 4),
        ],
        dtype=np.uint32,
    )
    arrays.fields["goal_ref"][:] = goals[rng.integers(0, len(goals), POPULATION)]
    return arrays


def _ns_per_agent(run: Callable[[], None], agents: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        run()
        samples.append((time.perf_counter_ns() - start) / agents)
    return round(statistics.median(samples), 1)


def measure(repeats: int) -> dict[str, object]:
    rng = np.random.default_rng(7)
    layer = PersonalityBehaviorLayer(capacity=POPULATION)
    regs = _registrations(rng, POPULATION)
    layer.register(0, regs)
    arrays = _kernel_arrays(rng, layer)
    signals: BehaviorSignals = signals_of(arrays.fields)
    out: BehaviorDecisions = decisions_of(arrays.fields)
    scattered = np.sort(rng.choice(POPULATION, AGENTS, replace=False)).astype(np.uint32)
    contiguous = np.arange(AGENTS, dtype=np.uint32)
    layer.decide(np.arange(POPULATION, dtype=np.uint32), signals, out)  # plans compiled and cached
    every = POPULATION // AGENTS  # the kernel's strided set: every second slot is 10,000 agents

    def step(core: str, slots: np.ndarray | None) -> Callable[[], None]:
        layer.use_core(core)  # chosen (and the C step bound) once, outside the timing, as in the kernel
        layer.step(0, every, arrays, cognition_available=True, slots=slots)
        return lambda: layer.step(0, every, arrays, cognition_available=True, slots=slots)

    def reevaluate(core: str, slots: np.ndarray) -> Callable[[], None]:
        layer.use_core(core)
        layer.step(0, every, arrays, cognition_available=True, slots=slots)

        def run() -> None:
            signals.fatigue_bp[slots] ^= 1  # every row's inputs changed: full tree, emotion, needs
            layer.step(0, every, arrays, cognition_available=True, slots=slots)

        return run

    def decide(slots: np.ndarray) -> Callable[[], None]:
        return lambda: layer.decide(slots, signals, out)

    def arbitrate(slots: np.ndarray) -> Callable[[], None]:
        # Cognition available and the cooldown passed at this tick: every row is fully arbitrated.
        eligible = np.ones(len(slots), dtype=bool)
        return lambda: layer.arbitrate(slots, eligible, 0, cognition_available=True)

    profiles = [profile_from_registration(r) for r in regs[:1_000]]
    inputs = [
        TreeInputs(
            int(signals.need_safety_bp[i]),
            int(signals.need_sustaining_bp[i]),
            int(signals.need_social_bp[i]),
            int(signals.need_purpose_bp[i]),
            int(signals.fatigue_bp[i]),
        )
        for i in range(1_000)
    ]

    def scalar() -> None:
        for profile, row in zip(profiles, inputs, strict=True):
            evaluate_personality_tree(profile, row, layer.config)

    def ns(run: Callable[[], None]) -> float:
        return _ns_per_agent(run, AGENTS, repeats)

    return {
        "benchmark": "behavior_step",
        "agents": AGENTS,
        "population": POPULATION,
        "repeats": repeats,
        "lachesis_step_ns_per_agent": ns(step("c", scattered)),
        "bt_eval_ns_per_agent": ns(reevaluate("c", scattered)),
        "lachesis_step_numpy_ns_per_agent": ns(step("numpy", scattered)),
        "bt_eval_numpy_ns_per_agent": ns(reevaluate("numpy", scattered)),
        "lachesis_step_strided_ns_per_agent": ns(step("c", None)),
        "lachesis_step_strided_numpy_ns_per_agent": ns(step("numpy", None)),
        "lachesis_step_contiguous_ns_per_agent": ns(step("c", contiguous)),
        "bt_eval_contiguous_ns_per_agent": ns(reevaluate("c", contiguous)),
        "decide_ns_per_agent": ns(decide(scattered)),
        "arbitrate_ns_per_agent": ns(arbitrate(scattered)),
        "baseline_scalar_bt_eval_ns_per_agent": _ns_per_agent(scalar, 1_000, max(3, repeats // 10)),
        "targets": {"lachesis_step_ns_per_agent": 50, "bt_eval_ns_per_agent": 500},
        "load_average_1m": round(os.getloadavg()[0], 2),
        "note": "shared 2-core machine; medians; compare with the same run's scalar baseline",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object (the only output)")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    result = measure(args.repeats)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
