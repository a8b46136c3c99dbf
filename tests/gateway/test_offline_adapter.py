"""The offline adapter: deterministic, schema-valid in every mode, built from the prompt, labelled offline."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognition_service.output_schemas import OUTPUT_SCHEMAS, OutputSchemaName
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import OFFLINE_LABEL, OfflineAdapter, read_context
from services.errors import InvalidArgument

ADAPTER = OfflineAdapter()


def test_context_comes_from_key_value_lines_and_memory_zones() -> None:
    request = ModelRequest(
        system_policy="policy",
        task_instruction="Top objective: repair the mill\nAddressed speaker: Ines",
        untrusted=(UntrustedPart("RECALLED_MEMORY", "[m-1] the flood of spring"),),
    )
    context = read_context(request)
    assert (context.objective, context.speaker, context.memory_ref) == ("repair the mill", "Ines", "m-1")
    assert context.memory_text == "the flood of spring"


def test_context_comes_from_json_zones() -> None:
    zone = json.dumps(
        {
            "objectives": [{"text": "find my brother"}],
            "speaker": "Oso",
            "memories": [{"ref": "e9", "text": "a letter"}],
        }
    )
    context = read_context(ModelRequest("p", "t", untrusted=(UntrustedPart("STORY_STATE", zone),)))
    assert (context.objective, context.speaker, context.memory_ref, context.memory_text) == (
        "find my brother",
        "Oso",
        "e9",
        "a letter",
    )


@pytest.mark.parametrize("schema", list(OutputSchemaName))
async def test_every_schema_validates_and_is_labelled(schema: OutputSchemaName) -> None:
    request = ModelRequest("policy", "Objective: bake\nSpeaker: Bram", output_schema=schema.value)
    reply = await ADAPTER.generate(request)
    parsed = OUTPUT_SCHEMAS[schema].model_validate_json(reply.text)
    assert reply.offline
    assert OFFLINE_LABEL in reply.text
    assert parsed is not None
    assert reply.usage.output_tokens == -(-len(reply.text) // 4)


@settings(max_examples=50, deadline=None)
@given(
    task=st.text(max_size=400),
    memory=st.text(max_size=400),
    mode=st.sampled_from(["dialogue", "decision", "reflection", "summary"]),
)
async def test_any_prompt_gets_a_valid_deterministic_reply(task: str, memory: str, mode: str) -> None:
    request = ModelRequest("policy", task, untrusted=(UntrustedPart("RECALLED_MEMORY", memory),), mode=mode)
    first, second = await ADAPTER.generate(request), await ADAPTER.generate(request)
    assert first == second
    schema = {
        "dialogue": "dialogue",
        "decision": "decision",
        "reflection": "reflection",
        "summary": "summary",
    }[mode]
    OUTPUT_SCHEMAS[OutputSchemaName(f"egbe.cognition.{schema}.v1")].model_validate_json(first.text)


def test_the_speaker_of_a_quoted_stimulus_is_addressed() -> None:
    request = ModelRequest("p", "t", untrusted=(UntrustedPart("STEWARD_INPUT", "Bram: is the bakery open?"),))
    assert read_context(request).speaker == "Bram"


async def test_blank_values_fall_back_to_defaults() -> None:
    reply = await ADAPTER.generate(ModelRequest("p", "Objective: \t\nSpeaker:  \u3000", mode="decision"))
    assert json.loads(reply.text)["target"] == "get through the day"


async def test_an_unknown_schema_names_the_field() -> None:
    with pytest.raises(InvalidArgument) as refused:
        await ADAPTER.generate(ModelRequest("p", "t", output_schema="nope"))
    assert refused.value.violations[0].field == "output_schema"


@pytest.mark.parametrize(
    ("objective", "family", "tags"),
    [
        ("repair the mill", "vocation", []),
        ("apologise to Bram for the flour", "social", ["relationship-repair"]),
        ("talk with Ines", "social", []),
        ("rest by the fire", "self-care", []),
        ("walk to the mill before dusk", "travel", []),
    ],
)
async def test_a_decision_names_the_goal_its_objective_serves(
    objective: str, family: str, tags: list[str]
) -> None:
    """So the kernel's HTN can pursue the decision once it is merged (cognition decides, behaviour acts)."""
    reply = await ADAPTER.generate(ModelRequest("p", f"Top objective: {objective}", mode="decision"))
    goal = json.loads(reply.text)["goal"]
    assert (goal["family"], goal.get("tags", [])) == (family, tags)
