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


PERSONA = """name: Adaeze the smith
vocation: smith
home: The cottages

values:
[value:craft] craft (94%)

quirks:
[quirk:0] hums while she works"""
CONTEXT = """perception:
[moment:place] place: Adaeze's smithy
[moment:emotion] emotion: determined

relationships:
[rel:kunle] Kunle (apprentice, affinity +72%)

top objective: answer the traveller"""
HEARD = (
    "speaker: player-1\n\nthe traveller (player-1) says: Adaeze, will the plough share be ready by harvest?"
)
MEMORY = "[mem-7] I told the traveller the forge was cold.\n[mem-2] Kunle burned his hand."


def _zoned(steward: str = HEARD, mode: str = "dialogue", memory: str = MEMORY) -> ModelRequest:
    return ModelRequest(
        "policy",
        "task",
        untrusted=(
            UntrustedPart("STEWARD_INPUT", steward),
            UntrustedPart("PERSONA", PERSONA),
            UntrustedPart("RETRIEVED_CONTEXT", CONTEXT),
            UntrustedPart("RECALLED_MEMORY", memory),
        ),
        mode=mode,
    )


def test_context_comes_from_the_zones_cognition_writes() -> None:
    context = read_context(_zoned())
    assert (context.name, context.vocation, context.quirk, context.value) == (
        "Adaeze the smith",
        "smith",
        "hums while she works",
        "craft",
    )
    assert (context.relation, context.relation_kind) == ("Kunle", "apprentice")
    assert (context.speaker, context.speaker_id) == ("the traveller", "player-1")
    assert context.heard == "Adaeze, will the plough share be ready by harvest?"
    assert (context.objective, context.place, context.emotion) == (
        "answer the traveller",
        "Adaeze's smithy",
        "determined",
    )
    assert context.memory_ref == "mem-7"


async def test_a_dialogue_answers_the_speaker_by_name_about_what_they_said_and_quotes_no_memory() -> None:
    reply = json.loads((await ADAPTER.generate(_zoned())).text)
    assert reply["utterance"].startswith(f"{OFFLINE_LABEL} ")
    assert "the traveller" in reply["utterance"]
    assert "will the plough share be ready by harvest" in reply["utterance"].lower()
    assert "Adaeze, will" not in reply["utterance"]  # the name the speaker called is not echoed back
    assert reply["addressed_to"] == "player-1"
    assert reply["cited_memory_refs"] == ["mem-7"]
    assert "forge was cold" not in reply["utterance"]
    assert "burned his hand" not in reply["utterance"]


async def test_replies_vary_with_the_call() -> None:
    """Same zones, a different recalled memory: the hash of the prompt picks other words."""
    utterances = {
        json.loads((await ADAPTER.generate(_zoned(memory=f"[mem-{i}] day {i}"))).text)["utterance"]
        for i in range(40)
    }
    assert len(utterances) >= 32


@pytest.mark.parametrize(
    ("steward", "chosen", "reason"),
    [
        (
            "crossroads kf: Kunle must choose: stay at the smith's forge or follow Tobi to the river.",
            "stay at the smith's forge",
            "work as smith",
        ),
        (
            "crossroads c-1: Which way?\noption 1: walk to the well\noption 2: visit Kunle at home",
            "visit Kunle at home",
            "Kunle (apprentice) matters to me",
        ),
    ],
)
async def test_a_crossroads_decision_picks_an_option_and_says_why(
    steward: str, chosen: str, reason: str
) -> None:
    reply = json.loads((await ADAPTER.generate(_zoned(steward, "decision"))).text)
    assert reply["action"] == "choose"
    assert reply["target"] == chosen
    assert reason in reply["rationale"]
    assert reply["rationale"].startswith(f"{OFFLINE_LABEL} ")
    assert chosen not in reply["rationale"]  # the option is named by its place, never quoted


# Each reply's free text, which a reader could take for a model's words: every piece carries the label.
LABELLED_TEXT = {
    OutputSchemaName.DIALOGUE: ("utterance",),
    OutputSchemaName.DECISION: ("rationale",),
    OutputSchemaName.REFLECTION: ("insight",),
    OutputSchemaName.SUMMARY: ("summary", "beats"),
}


@pytest.mark.parametrize("schema", list(OutputSchemaName))
async def test_every_schema_validates_and_is_labelled(schema: OutputSchemaName) -> None:
    request = ModelRequest("policy", "Objective: bake\nSpeaker: Bram", output_schema=schema.value)
    reply = await ADAPTER.generate(request)
    OUTPUT_SCHEMAS[schema].model_validate_json(reply.text)  # (raises when the reply breaks its schema)
    assert reply.offline
    fields = json.loads(reply.text)
    texts = [text for name in LABELLED_TEXT[schema] for text in _pieces(fields[name])]
    assert texts
    assert [text for text in texts if not text.startswith(f"{OFFLINE_LABEL} ")] == []
    assert reply.usage.output_tokens == -(-len(reply.text) // 4)


def _pieces(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


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
    OUTPUT_SCHEMAS[OutputSchemaName(f"egbe.cognition.{mode}.v1")].model_validate_json(first.text)


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
