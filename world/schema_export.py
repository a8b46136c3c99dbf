"""Exports the JSON Schemas of scenario files and run artifacts to schema/ (`--check` compares instead)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from world.artifact import RunArtifact
from world.scenario import Scenario

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
SCHEMAS: dict[str, type[BaseModel]] = {
    "run-artifact.schema.json": RunArtifact,
    "scenario.schema.json": Scenario,
}


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if schema/ is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, model in SCHEMAS.items():
        path = SCHEMA_DIR / name
        text = render(model)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            SCHEMA_DIR.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"schema/ is stale: {', '.join(stale)}; run python -m world.schema_export", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
