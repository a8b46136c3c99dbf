"""Situation text: the player's line, an open crossroads, an irreversible action's lead window, and
where an Ori stands and who is near, for exactly the Ori that have one, in every encoding."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import json_format

from world.loop import perception_batch
from world.perception import build_perception
from world.population import Population, build_population
from world.run import world_setup
from world.scenario import Encoding, Scenario, load_scenario
from world.script import ScriptIndex
from world.simulation import WorldState, initial_state

SMITHY = (730_000, 520_000)


@pytest.fixture(scope="module")
def hamlet() -> tuple[Scenario, Population, ScriptIndex]:
    scenario = load_scenario("hamlet")
    population = build_population(scenario, seed=7)
    return scenario, population, ScriptIndex.build(scenario, population)


def _at_the_smithy(scenario: Scenario, population: Population, tick: int) -> WorldState:
    """The player at the smithy with Adaeze; Kunle 3 m off, Emeka 10 m, Folasade 25 m (out of the scene)."""
    state = initial_state(scenario, population)
    state.tick = tick
    state.player_xy = np.array(SMITHY, dtype=np.int64)
    x, y = SMITHY
    for ori, at in {"adaeze": (x, y), "kunle": (x + 3_000, y), "emeka": (x, y + 10_000)}.items():
        state.ori_xy[population.index_of(ori)] = at
    state.ori_xy[population.index_of("folasade")] = (x, y + 25_000)
    return state


def _as_dicts(situations: list) -> list[dict[str, object]]:  # type: ignore[type-arg]
    """Each entry as protobuf JSON, its slot always shown (JSON leaves out a zero)."""
    return [
        {"slot": s.slot, **json_format.MessageToDict(s, preserving_proto_field_name=True)} for s in situations
    ]


def test_the_addressed_ori_hears_the_line_and_the_scene_knows_who_is_near(hamlet) -> None:  # type: ignore[no-untyped-def]
    scenario, population, script = hamlet
    perception = build_perception(scenario, population, script, _at_the_smithy(scenario, population, 700))
    assert _as_dicts(perception.situations) == [
        {
            "slot": population.index_of("adaeze"),
            "player_line": {
                "speaker_id": "player-1",
                "speaker_name": "the player",
                "text": "Adaeze, can the new plough share be ready by the harvest?",
            },
            "place": "Adaeze's smithy",
            "nearby": ["Kunle", "Emeka"],
        },
        {
            "slot": population.index_of("kunle"),
            "place": "Adaeze's smithy",
            "nearby": ["Adaeze the smith", "Emeka"],
        },
        {
            # outside every location; Folasade is beyond the player's scene but within Emeka's
            "slot": population.index_of("emeka"),
            "nearby": ["Adaeze the smith", "Kunle", "Folasade the baker"],
        },
    ]
    assert perception.arrays["addressed_by_player_id"][population.index_of("adaeze")] == 1
    # A tick later the line is gone; the scene's places and neighbours remain.
    later = build_perception(scenario, population, script, _at_the_smithy(scenario, population, 701))
    assert [s.HasField("player_line") for s in later.situations] == [False, False, False]


def test_crossroads_and_the_irreversible_action_travel_while_they_are_open(hamlet) -> None:  # type: ignore[no-untyped-def]
    scenario, population, script = hamlet
    kunle = build_perception(scenario, population, script, _at_the_smithy(scenario, population, 950))
    (crossing,) = [s for s in kunle.situations if s.HasField("crossroads")]
    assert crossing.slot == population.index_of("kunle")
    assert json_format.MessageToDict(crossing.crossroads, preserving_proto_field_name=True) == {
        "crossroads_id": "crossroads-kunle-900",
        "prompt": "Kunle must choose: stay at the forge or follow Tobi to the river.",
        "options": ["stay at the forge", "follow Tobi to the river"],
    }
    state = _at_the_smithy(scenario, population, 2_900)  # the player is a kilometre from the mill
    ireti = population.index_of("ireti")
    state.ori_xy[population.index_of("chidi")] = state.ori_xy[ireti] + (5_000, 0)
    mill = build_perception(scenario, population, script, state)
    far = [s for s in mill.situations if s.slot == ireti]
    assert _as_dicts(far) == [
        {
            "slot": ireti,
            "crossroads": {
                "crossroads_id": "crossroads-ireti-2850",
                "prompt": "Ireti decides whether to open the sluice and flood the lower orchard to save the "
                "mill.",
                "options": [
                    "open the sluice and flood the lower orchard",
                    "keep the sluice shut and risk the mill",
                ],
            },
            "irreversible_action": "The player breaks the old mill dam; the lower orchard will flood.",
            "place": "The water mill",
            "nearby": ["Chidi the ferryman"],
        }
    ]
    state.tick = 3_001  # after the action and the crossroads: nothing for Ireti, who is far from the player
    assert ireti not in [s.slot for s in build_perception(scenario, population, script, state).situations]


@pytest.mark.parametrize("encoding", list(Encoding))
def test_every_encoding_carries_the_situations(hamlet, encoding: Encoding) -> None:  # type: ignore[no-untyped-def]
    scenario = hamlet[0].model_copy(update={"encoding": encoding})
    setup = world_setup(scenario, 7, "hamlet-7")
    state = _at_the_smithy(scenario, setup.population, 700)
    perception = build_perception(scenario, setup.population, setup.script, state)
    slots = np.arange(setup.population.size, dtype=np.uint32)
    batch = perception_batch(setup, perception, perception, slots)
    assert list(batch.situations) == perception.situations
    assert len(batch.situations) == 3


def test_a_large_world_sends_text_only_for_the_few_ori_that_have_some() -> None:
    scenario = load_scenario("solo-ceiling")
    population = build_population(scenario, seed=7)
    script = ScriptIndex.build(scenario, population)
    state = initial_state(scenario, population)
    state.tick = 600  # the player addresses Adaeze
    perception = build_perception(scenario, population, script, state)
    distance = np.hypot(*(state.ori_xy - state.player_xy).T)
    in_scene = set(np.flatnonzero(distance <= scenario.senses.scene_mm).tolist())
    slots = [s.slot for s in perception.situations]
    assert slots == sorted(in_scene | {population.index_of("adaeze")})
    assert 0 < len(slots) < 40 < population.size
    assert all(len(s.nearby) <= 16 for s in perception.situations)
    (line,) = [s for s in perception.situations if s.HasField("player_line")]
    assert line.slot == population.index_of("adaeze")
