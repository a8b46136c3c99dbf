"""The committed JSON Schemas are exactly what the code exports, and the shipped scenarios satisfy theirs."""

from __future__ import annotations

import json

from world.schema_export import SCHEMA_DIR, SCHEMAS, main, render


def test_committed_schemas_are_current() -> None:
    for name, model in SCHEMAS.items():
        assert (SCHEMA_DIR / name).read_text() == render(model), f"{name} is stale"
    assert main(["--check"]) == 0


def test_schema_refuses_what_the_model_refuses() -> None:
    schema = json.loads((SCHEMA_DIR / "scenario.schema.json").read_text())
    assert schema["additionalProperties"] is False
    personality = schema["$defs"]["Personality"]["properties"]["warmth_bp"]
    assert personality["maximum"] == 10_000
