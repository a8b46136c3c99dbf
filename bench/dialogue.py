"""How soon a player's line comes back as the Ori's spoken reply, at 20 Hz over real gRPC.

The hamlet world runs paced to the wall clock (20 ticks a second) through `egbe demo`'s own code
path with its services embedded and the offline adapter answering; the player speaks to one of its
Ori every `--every` ticks. For each line it reports how many ticks passed before the reply was in
the world's hands, and the time the reply spent outside the model: the dispatcher's round trip
from the tick that issued the call to the gateway's answer, less the adapter's own time, both
carried on the reply's payload and kept in the run's conversation records. The baseline measured
in the same run is the adapter's own time per reply.

    python -m bench.dialogue --json            # 20 lines, one every 3 s (about a minute)
    python -m bench.dialogue --json --smoke    # 4 lines, one every 2 s

Targets: the reply in the world's hands within 2 ticks at p99; non-model time <= 30 ms at p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from bench.world_demo import embedded_settings, run_embedded
from services.logging import configure_logging
from services.settings import LogFormat
from world.artifact import RunArtifact
from world.run import RunOptions
from world.scenario import Scenario, load_scenario, parse_scenario

SEED = 7
FIRST_LINE_TICK = 100
TAIL_TICKS = 100
TARGET_REPLY_TICKS_P99 = 2
TARGET_NON_MODEL_MS_P99 = 30.0


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))], 3)


def talking_scenario(lines: int, every: int) -> Scenario:
    """Hamlet with its script replaced by the player speaking to its Ori in turn, every `every` ticks."""
    base = load_scenario("hamlet")
    document = base.model_dump(mode="json")
    speakers = [ori for ori in base.ori if not ori.minor]
    addresses = []
    for i in range(lines):
        ori = speakers[i % len(speakers)]
        line = f"{ori.name.split()[0]}, how goes your work today? (line {i + 1})"
        addresses.append({"at_tick": FIRST_LINE_TICK + i * every, "ori": ori.id, "line": line})
    duration = FIRST_LINE_TICK + lines * every + TAIL_TICKS
    document["player"] = {**document["player"], "addresses": addresses, "path": [], "crossroads": []}
    document["player"].update(irreversible_actions=[], steward_directives=[], operator_actions=[])
    document.update(name="hamlet-talk", duration_ticks=duration, reduced_duration_ticks=None)
    return parse_scenario(document, "bench:hamlet-talk")


def figures(artifact: RunArtifact, lines: int) -> dict[str, object]:
    answered = [c for c in artifact.conversations if c.answered]
    reply_ticks = [float(c.latency_ticks) for c in answered if c.latency_ticks is not None]
    non_model = [
        c.dispatch_ms - c.model_ms for c in answered if c.dispatch_ms is not None and c.model_ms is not None
    ]
    return {
        "benchmark": "dialogue",
        "lines": lines,
        "answered": len(answered),
        "answered_by": artifact.answered_by,
        "reply_ticks_p50": _percentile(reply_ticks, 0.5),
        "reply_ticks_p99": _percentile(reply_ticks, 0.99),
        "non_model_ms_p50": _percentile(non_model, 0.5),
        "non_model_ms_p99": _percentile(non_model, 0.99),
        "reply_ms_p50": _percentile([c.latency_ms for c in answered if c.latency_ms is not None], 0.5),
        "baseline_model_ms_p50": _percentile([c.model_ms for c in answered if c.model_ms is not None], 0.5),
        "targets": {"reply_ticks_p99": TARGET_REPLY_TICKS_P99, "non_model_ms_p99": TARGET_NON_MODEL_MS_P99},
    }


async def _bench(lines: int, every: int) -> dict[str, object]:
    scenario = talking_scenario(lines, every)
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as scratch:
        root = Path(scratch)
        options = RunOptions(scenario, SEED, realtime=True, progress=False)
        artifact = await run_embedded(embedded_settings(root / "data"), options, root / "runs")
        return figures(artifact, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    parser.add_argument("--smoke", action="store_true", help="4 lines, one every 40 ticks")
    parser.add_argument("--lines", type=int, default=20, help="lines the player says")
    parser.add_argument("--every", type=int, default=60, help="ticks between lines (60 = 3 s at 20 Hz)")
    args = parser.parse_args(argv)
    lines, every = (4, 40) if args.smoke else (args.lines, args.every)
    if lines < 1 or every < 1:
        parser.error("--lines and --every must be at least 1")
    configure_logging(LogFormat.JSON, "warning")  # service logs go to stderr; stdout holds the JSON
    print(json.dumps(asyncio.run(_bench(lines, every)), indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
