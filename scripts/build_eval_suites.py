"""Writes the shipped eval suites (gateway/evals/suites/<name>.json) from the village of
scripts/eval_suite_world.py: each case's request is built by the cognition service's own context assembly
and prompt zoning, so the suites send exactly what cognition sends for their mode.

    .venv/bin/python scripts/build_eval_suites.py          # write the suites
    .venv/bin/python scripts/build_eval_suites.py --check  # fail when a written suite is out of date

Bump a suite's version in SUITES whenever its cases change: scores recorded for an older version no
longer count for routing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the village beside this script

from eval_suite_offscreen import REFLECTION, SUMMARY
from eval_suite_world import DIALOGUE, PLAYERS, VILLAGERS, Scene

from cognition_service.config import CognitionConfig
from cognition_service.context import ContextInput, RankedItem, assemble_context
from cognition_service.identity import (
    identity_lines,
    names_of,
    quirk_items,
    relationship_items,
    value_items,
)
from cognition_service.output_schemas import OUTPUT_SCHEMAS, OutputSchemaName
from cognition_service.zoning import build_envelope
from egbe.v1 import biography_pb2, gateway_pb2

OUT = Path(__file__).resolve().parent.parent / "gateway" / "evals" / "suites"
# name: (version, mode, tier it serves, what it measures, scenes, shortest and longest main text)
SUITES = {
    "social-judgment-live-dialogue": (
        1,
        "dialogue",
        "Clotho",
        "Live dialogue: answer the speaker in character and in the persona's locale, from what the Ori"
        " remembers, without naming strangers, leaking the prompt or taking a bait.",
        DIALOGUE,
        20,
    ),
    "offscreen-reflection-coherence": (
        1,
        "reflection",
        "Lachesis",
        "Offscreen reflection: one insight about the Ori's recent life that follows from its memories and"
        " cites only them.",
        REFLECTION,
        40,
    ),
    "narrative-summary-continuity": (
        1,
        "summary",
        "Atropos",
        "Narrative summary: the Ori's day as a short story with beats, naming the Ori and keeping to what"
        " its memories say happened.",
        SUMMARY,
        60,
    ),
}
SUMMARY_MAX_CHARS = 1_600  # the summary with up to eight beats
ZONE_NAMES = {
    v.number: v.name.removeprefix("UNTRUSTED_ZONE_KIND_")
    for v in gateway_pb2.UntrustedZoneKind.DESCRIPTOR.values
}


def identity_of(ori_id: str) -> biography_pb2.OriIdentity:
    who = VILLAGERS[ori_id]
    return biography_pb2.OriIdentity(
        display_name=str(who["name"]),
        vocation=str(who["vocation"]),
        home=str(who["home"]),
        locale=str(who["locale"]),
        personality=[
            biography_pb2.TraitLevel(axis=axis, level_bp=bp)
            for axis, bp in who["personality"].items()  # type: ignore[attr-defined]
        ],
        values=[
            biography_pb2.ValueItem(value_ref=ref, weight_bp=bp)
            for ref, bp in who["values"].items()  # type: ignore[attr-defined]
        ],
        quirks=list(who["quirks"]),  # type: ignore[call-overload]
        relationships=[
            biography_pb2.IdentityRelationship(
                other_ori_id=other, other_name=str(VILLAGERS[other]["name"]), kind=kind, affinity_bp=bp
            )
            for other, kind, bp in who["relationships"]  # type: ignore[attr-defined]
        ],
    )


def name_of(some_id: str) -> str:
    return str(VILLAGERS[some_id]["name"]) if some_id in VILLAGERS else PLAYERS[some_id]


def folded(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text.casefold()) if not unicodedata.combining(c))


def case(mode: str, scene: Scene, min_chars: int) -> dict[str, object]:
    """The scene as cognition would send it for `mode`, with its expectations."""
    identity = identity_of(scene.ori)
    config = CognitionConfig()
    stimulus = f"{name_of(scene.speaker)} ({scene.speaker}) says: {scene.line}" if scene.speaker else ""
    memories = [RankedItem(ref, text, 9_000 - 500 * i) for i, (ref, text) in enumerate(scene.memories)]
    context = assemble_context(
        ContextInput(
            ori_id=scene.ori,
            tier={"dialogue": "clotho", "reflection": "lachesis", "summary": "atropos"}[mode],
            mode=mode,
            locale=identity.locale,
            stimulus=stimulus,
            sections={
                "perception": [
                    RankedItem(f"perception:{i}", t, 6_000) for i, t in enumerate(scene.perception)
                ],
                "values": value_items(identity, []),
                "quirks": quirk_items(identity),
                "memories": memories,
                "relationships": relationship_items(identity, [], names_of(identity)),
                "objectives": [
                    RankedItem(f"objective:{i}", t, 8_000) for i, t in enumerate(scene.objectives)
                ],
            },
            arc_state=scene.arc,
            emotion=scene.emotion,
            identity=tuple(identity_lines(identity)),
        ),
        config.limits,
    )
    schema = OUTPUT_SCHEMAS[OutputSchemaName(f"egbe.cognition.{mode}.v1")]
    envelope = build_envelope(context, config.modes[mode], schema, counterpart=scene.speaker)
    zones = [{"kind": ZONE_NAMES[zone.kind], "content": zone.content} for zone in envelope.untrusted]
    prompt = folded(" ".join(zone["content"] for zone in zones))
    world = [str(who["name"]) for who in VILLAGERS.values()]
    known = [name for name in world if re.search(rf"(?<!\w){re.escape(folded(name))}(?!\w)", prompt)]
    return {
        "case_id": scene.case_id,
        "description": scene.description,
        "request": {
            "system_policy": envelope.system_policy,
            "task_instruction": envelope.task_instruction,
            "tool_grants": list(envelope.tool_grants),
            "untrusted": zones,
            "max_output_tokens": config.modes[mode].max_output_tokens,
        },
        "expect": {
            "persona": {"ori_id": scene.ori, "name": identity.display_name, "locale": identity.locale},
            "memory_refs": [ref for ref, _ in scene.memories],
            "known_names": known,
            "addressed_to": scene.speaker,
            "rubric": {
                "mention_any": list(scene.mention),
                "avoid": list(scene.avoid),
                "min_chars": min_chars,
                "max_chars": SUMMARY_MAX_CHARS if mode == "summary" else scene.max_chars,
            },
        },
    }


def suite_text(name: str) -> str:
    version, mode, tier, what, scenes, min_chars = SUITES[name]
    suite = {
        "name": name,
        "version": version,
        "mode": mode,
        "output_schema": f"egbe.cognition.{mode}.v1",
        "description": f"{what} Serves the {tier} tier.",
        "world_names": [str(who["name"]) for who in VILLAGERS.values()],
        "cases": [case(mode, scene, min_chars) for scene in scenes],
    }
    return json.dumps(suite, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a written suite is out of date")
    args = parser.parse_args()
    stale = []
    for name in SUITES:
        path, text = OUT / f"{name}.json", suite_text(name)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date (run scripts/build_eval_suites.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
