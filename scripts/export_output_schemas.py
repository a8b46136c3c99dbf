"""Publish cognition's reply contract beside the protocol: one JSON Schema per output schema name.

Cognition owns the structured replies a model must give (cognition_service/output_schemas.py). A
GenerateRequest names one in `output_schema`; other parties (the gateway's offline adapter) learn
its shape from the JSON Schema written here to protos/egbe/v1/schemas/<name>.json, which
scripts/gen_protos.py ships inside the egbe.v1 package. `--check` (run by `make protos-check`)
fails if a published schema differs from the models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from cognition_service.output_schemas import OUTPUT_SCHEMAS

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "protos" / "egbe" / "v1" / "schemas"


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def published() -> dict[Path, str]:
    """Each schema file and its text, as the models say it should read."""
    return {SCHEMA_DIR / f"{name.value}.json": render(model) for name, model in OUTPUT_SCHEMAS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a published schema is out of date")
    args = parser.parse_args(argv)
    wanted = published()
    if args.check:
        present = set(SCHEMA_DIR.glob("*.json"))
        stale = sorted(p.name for p, text in wanted.items() if not p.is_file() or p.read_text() != text)
        extra = sorted(p.name for p in present - set(wanted))
        if stale or extra:
            print("reply schemas are stale; run `make protos`:", *stale, *extra, sep="\n  ", file=sys.stderr)
            return 1
        print("reply schemas are current")
        return 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for gone in set(SCHEMA_DIR.glob("*.json")) - set(wanted):
        gone.unlink()
    for path, text in wanted.items():
        path.write_text(text)
    print(f"published {len(wanted)} reply schemas into {SCHEMA_DIR.relative_to(SCHEMA_DIR.parents[3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
