"""RegisterAgents carries every Ori's identity: authored ones as written, generated ones seeded."""

from __future__ import annotations

from google.protobuf import json_format

from world.population import GIVEN_NAMES, build_population
from world.registration import registration_request
from world.scenario import load_scenario


def test_an_authored_ori_is_registered_as_the_scenario_wrote_it() -> None:
    scenario = load_scenario("hamlet")
    population = build_population(scenario, seed=7)
    request = registration_request(population, "hamlet-7", "demo")
    assert len(request.agents) == 12
    adaeze = request.agents[population.index_of("adaeze")]
    identity = json_format.MessageToDict(adaeze.identity, preserving_proto_field_name=True)
    persona = identity.pop("persona")
    assert persona.startswith("I am Adaeze, the hamlet's smith.")
    assert identity == {
        "display_name": "Adaeze the smith",
        "vocation": "smith",
        "home": "The cottages",
        "locale": "en-US",
        "personality": [
            {"axis": "warmth", "level_bp": 5200},
            {"axis": "curiosity", "level_bp": 6100},
            {"axis": "caution", "level_bp": 4000},
            {"axis": "ambition", "level_bp": 7800},
            {"axis": "conscientiousness", "level_bp": 8200},
            {"axis": "candor", "level_bp": 7400},
            {"axis": "defiance", "level_bp": 5600},
            {"axis": "playfulness", "level_bp": 3100},
        ],
        "values": [
            {"value_ref": "craft", "weight_bp": 9400},
            {"value_ref": "kinship", "weight_bp": 8100},
            {"value_ref": "honesty", "weight_bp": 7000},
            {"value_ref": "autonomy", "weight_bp": 5200},
        ],
        "quirks": ["hums while she works", "counts hammer strokes"],
        "needs": {
            "safety_bp": 1000,
            "sustaining_bp": 3000,
            "social_bp": 3000,
            "purpose_bp": 4200,
            "fatigue_bp": 2000,
        },
        "relationships": [
            {"other_ori_id": "kunle", "other_name": "Kunle", "kind": "apprentice", "affinity_bp": 7200},
            {
                "other_ori_id": "folasade",
                "other_name": "Folasade the baker",
                "kind": "friend",
                "affinity_bp": 6400,
            },
            {
                "other_ori_id": "ireti",
                "other_name": "Ireti the miller",
                "kind": "rival",
                "affinity_bp": -2100,
            },
        ],
    }
    kunle = request.agents[population.index_of("kunle")].identity
    assert kunle.minor
    assert (kunle.display_name, kunle.vocation, kunle.home) == ("Kunle", "apprentice", "The cottages")
    tobi = request.agents[population.index_of("tobi")].identity
    assert (tobi.vocation, tobi.home, tobi.minor) == ("", "The bakery", True)
    assert all(a.identity.persona for a in request.agents)


def test_a_generated_ori_gets_a_seeded_name_and_its_cohorts_vocation_and_home() -> None:
    scenario = load_scenario("solo-ceiling")
    population = build_population(scenario, seed=7)
    request = registration_request(population, "solo-ceiling-7", "demo")
    row = population.index_of("resident-00003")
    identity = request.agents[row].identity
    given, suffix = identity.display_name.split(" ", 1)
    assert given in GIVEN_NAMES
    assert suffix == "(resident-00003)"
    assert (identity.vocation, identity.home) == ("quarter-work-3", scenario.map.locations[6].name)
    assert scenario.map.locations[6].id == "quarter-3"
    assert identity.minor == request.agents[row].minor
    assert [t.level_bp for t in identity.personality] == population.rows[row].personality
    assert len(identity.values) == 4
    assert not identity.relationships
    assert not identity.persona
    again = registration_request(build_population(scenario, seed=7), "solo-ceiling-7", "demo")
    assert again.agents[row].identity == identity
    other_seed = build_population(scenario, seed=8)
    names = [r.name for r in population.rows if not r.authored]
    assert len(set(names)) == len(names) == 1_422
    assert len({n.split(" ", 1)[0] for n in names}) == len(GIVEN_NAMES)
    assert [r.name for r in other_seed.rows] != [r.name for r in population.rows]
