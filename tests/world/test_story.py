"""What the world hears back: replies matched to the player's lines (rows or columns), unanswered lines
kept, and the decisions an Ori took at a crossroads or before an irreversible action."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, struct_pb2

from egbe.v1 import action_pb2, cognition_pb2, common_pb2
from world.artifact import ConversationRecord, MomentDecision, SpokenPlanBudget
from world.population import build_population
from world.scenario import load_scenario
from world.script import ScriptIndex
from world.story import MOMENT_MERGE_TICKS, StoryRecorder, cognition_results, issue_ticks, speech_of

LINE = "Adaeze, can the new plough share be ready by the harvest?"


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def _say(heard_tick: int, text: str, addressed_to: str = "player-1", **extra: Any) -> struct_pb2.Struct:
    """A dialogue result's payload as cognition and the dispatcher write it."""
    plan = cognition_pb2.SpokenReplyPlan(
        text=text,
        locale="en-US",
        end_to_end_budget_ms=1_500,
        stages=[cognition_pb2.LatencyStage(stage="tts", budget_ms=300, measured_ms=420, overran=True)],
        stages_total_ms=1_400,
        overran_stages=["tts"],
        within_budget=False,
    )
    return _struct(
        {
            "mode": "dialogue",
            "run_id": f"run-{heard_tick}",
            "request_id": "req",
            "output_id": "out",
            "offline": True,
            "reply": {"utterance": text, "addressed_to": addressed_to, "emotion": "calm"},
            "speech": {
                "text": text,
                "locale": "en-US",
                "addressed_to": addressed_to,
                "addressed_name": "the player",
                "heard": LINE,
                "heard_tick": heard_tick,
                "source": "offline",
            },
            "spoken_reply": json_format.MessageToDict(plan, preserving_proto_field_name=True),
            "model_us": 250,
            "dispatch_us": 8_400,
            **extra,
        }
    )


def _decision(action: str, rationale: str, run_id: str = "run-d") -> struct_pb2.Struct:
    return _struct(
        {
            "mode": "decision",
            "run_id": run_id,
            "offline": True,
            "reply": {"action": action, "target": "smithy", "rationale": rationale},
        }
    )


def test_a_reply_is_read_from_rows_and_from_delta_columns() -> None:
    payload = _say(700, "By harvest, if Kunle keeps the bellows going.")
    rows = action_pb2.ActionBatch(
        intents=[
            action_pb2.ActionIntent(
                slot=0, kind=action_pb2.ACTION_KIND_WORK, source=action_pb2.ACTION_SOURCE_HTN
            ),
            action_pb2.ActionIntent(
                slot=3,
                kind=action_pb2.ACTION_KIND_SAY,
                tier=common_pb2.COGNITION_TIER_CLOTHO,
                source=action_pb2.ACTION_SOURCE_COGNITION,
                payload=payload,
            ),
        ]
    )
    columns = action_pb2.ActionBatch(
        columns=action_pb2.ActionColumns(
            count=2,
            slots=np.array([5, 3], dtype="<u4").tobytes(),
            tier=np.array(
                [common_pb2.COGNITION_TIER_ATROPOS, common_pb2.COGNITION_TIER_CLOTHO], "u1"
            ).tobytes(),
            payloads=[
                action_pb2.ActionPayload(slot=5, payload=_struct({"guard": "repeated-action"})),
                action_pb2.ActionPayload(slot=3, payload=payload),
            ],
        )
    )
    for batch in (rows, columns):
        (result,) = cognition_results(batch)
        assert (result.slot, result.tier) == (3, common_pb2.COGNITION_TIER_CLOTHO)
        speech = speech_of(result)
        assert speech is not None
        assert (speech.slot, speech.text, speech.addressed_to, speech.heard_tick, speech.source) == (
            3,
            "By harvest, if Kunle keeps the bellows going.",
            "player-1",
            700,
            "offline",
        )
        assert (speech.model_us, speech.dispatch_us, speech.run_id) == (250.0, 8_400.0, "run-700")
        assert speech.plan == SpokenPlanBudget(
            end_to_end_budget_ms=1_500, stages_total_ms=1_400, within_budget=False, overran_stages=["tts"]
        )
    decision = cognition_results(rows)[0]
    decision.payload.CopyFrom(_decision("stay", "the forge"))
    assert speech_of(decision) is None  # not a dialogue
    no_speech = _say(700, "x")
    del no_speech.fields["speech"]
    assert speech_of(type(decision)(3, 1, no_speech)) is None


@pytest.fixture
def recorder() -> StoryRecorder:
    scenario = load_scenario("hamlet")
    population = build_population(scenario, seed=7)
    return StoryRecorder(population, ScriptIndex.build(scenario, population))


def _tick(recorder: StoryRecorder, tick: int, sent: float, received: float, *results: Any) -> None:
    recorder.sent(tick, sent)
    recorder.received(tick, list(results), received)


def _reply_result(slot: int, payload: struct_pb2.Struct) -> Any:
    batch = action_pb2.ActionBatch(
        intents=[
            action_pb2.ActionIntent(
                slot=slot,
                tier=common_pb2.COGNITION_TIER_CLOTHO,
                source=action_pb2.ACTION_SOURCE_COGNITION,
                payload=payload,
            )
        ]
    )
    return cognition_results(batch)[0]


def test_each_line_gets_its_reply_and_a_line_never_answered_is_kept(recorder: StoryRecorder) -> None:
    adaeze, folasade = recorder.population.index_of("adaeze"), recorder.population.index_of("folasade")
    _tick(recorder, 699, 0.9, 0.95)
    _tick(recorder, 700, 1.0, 1.004)
    reply = _say(700, "By harvest, if Kunle keeps the bellows going.")
    _tick(recorder, 701, 1.01, 1.0225, _reply_result(adaeze, reply))
    _tick(recorder, 702, 1.03, 1.04, _reply_result(adaeze, _say(700, "A second answer to the same line.")))
    _tick(recorder, 1_600, 2.0, 2.01)
    _tick(recorder, 1_601, 2.02, 2.03, _reply_result(folasade, _say(1_599, "Not this line.")))
    _tick(recorder, 1_602, 2.04, 2.05, _reply_result(folasade, _say(1_600, "Not this player.", "player-2")))
    _tick(recorder, 1_603, 2.06, 2.07, _reply_result(adaeze, _say(1_600, "Not the addressed Ori.")))
    answered, unanswered = recorder.conversations({})
    assert answered == ConversationRecord(
        line_tick=700,
        line=LINE,
        speaker_id="player-1",
        speaker_name="the player",
        ori_id="adaeze",
        ori_name="Adaeze the smith",
        answered=True,
        reply="By harvest, if Kunle keeps the bellows going.",
        locale="en-US",
        reply_tick=701,
        latency_ticks=1,
        latency_ms=22.5,
        tier="clotho",
        source="offline",
        run_id="run-700",
        model_ms=0.25,
        dispatch_ms=8.4,
        plan=SpokenPlanBudget(
            end_to_end_budget_ms=1_500, stages_total_ms=1_400, within_budget=False, overran_stages=["tts"]
        ),
    )
    assert unanswered == ConversationRecord(
        line_tick=1_600,
        line="Folasade, who should carry bread to the ferry today?",
        speaker_id="player-1",
        speaker_name="the player",
        ori_id="folasade",
        ori_name="Folasade the baker",
        answered=False,
    )
    # The reply's tier is the tier its call ran at, as audited, not the Ori's tier when it arrived.
    audited, _ = recorder.conversations({"run-700": "lachesis", "run-other": "atropos"})
    assert audited == answered.model_copy(update={"tier": "lachesis"})


def test_decisions_issued_inside_a_moments_window_are_what_it_came_to(recorder: StoryRecorder) -> None:
    kunle, ireti = recorder.population.index_of("kunle"), recorder.population.index_of("ireti")
    issued_at = issue_ticks(
        {
            "run-early": "hamlet-7:898:1:clotho_live_planning",
            "run-forge": "hamlet-7:949:1:clotho_live_planning",
            "run-last": "hamlet-7:1099:1:clotho_live_planning",
            "run-after": "hamlet-7:1100:1:clotho_live_planning",
            "run-2990": "hamlet-7:2990:4:dialogue",
            "not-a-call-id": "free text",
        }
    )
    assert issued_at == {
        "run-early": 898,
        "run-forge": 949,
        "run-last": 1_099,
        "run-after": 1_100,
        "run-2990": 2_990,
    }
    forge = _decision("stay at the forge", "Adaeze is counting on me", "run-forge")
    _tick(
        recorder, 900, 0, 0, _reply_result(kunle, _decision("follow Tobi to the river", "early", "run-early"))
    )
    _tick(recorder, 950, 0, 0, _reply_result(kunle, forge))
    _tick(recorder, 1_000, 0, 0, _reply_result(kunle, _decision("rest", "tired", "run-unaudited")))
    _tick(recorder, 1_150, 0, 0, _reply_result(kunle, _decision("follow Tobi", "at last", "run-last")))
    _tick(recorder, 1_150, 0, 0, _reply_result(kunle, _decision("sleep", "after", "run-after")))
    _tick(
        recorder,
        1_100 + MOMENT_MERGE_TICKS,
        0,
        0,
        _reply_result(kunle, _decision("late", "late", "run-last")),
    )
    _tick(recorder, 3_100, 0, 0, _reply_result(ireti, _say(2_990, "I will not open it.")))
    crossroads, sluice, dam = recorder.moment_records(issued_at)
    assert (crossroads.kind, crossroads.id, crossroads.ori_name) == (
        "crossroads",
        "crossroads-kunle-900",
        "Kunle",
    )
    assert (crossroads.first_tick, crossroads.last_tick) == (900, 1_099)
    assert crossroads.options == ["stay at the forge", "follow Tobi to the river"]
    assert crossroads.decisions == [
        MomentDecision(
            tick=950,
            mode="decision",
            run_id="run-forge",
            offline=True,
            choice="stay at the forge smithy",
            rationale="Adaeze is counting on me",
            chosen_option="stay at the forge",
        ),
        MomentDecision(
            tick=1_000,
            mode="decision",
            run_id="run-unaudited",
            offline=True,
            choice="rest smithy",
            rationale="tired",
        ),
        MomentDecision(
            tick=1_150,
            mode="decision",
            run_id="run-last",
            offline=True,
            choice="follow Tobi smithy",
            rationale="at last",
        ),
    ]
    assert (sluice.id, dam.id, dam.kind) == (
        "crossroads-ireti-2850",
        "irreversible-ireti-3000",
        "irreversible_action",
    )
    assert (dam.first_tick, dam.last_tick, dam.options) == (2_850, 3_000, [])
    spoken = MomentDecision(
        tick=3_100, mode="dialogue", run_id="run-2990", offline=True, choice="I will not open it."
    )
    assert sluice.decisions == dam.decisions == [spoken]


def test_an_ori_holding_a_cognition_action_is_not_a_new_result(recorder: StoryRecorder) -> None:
    kunle = recorder.population.index_of("kunle")
    held = action_pb2.ActionBatch(
        intents=[
            action_pb2.ActionIntent(
                slot=kunle, source=action_pb2.ACTION_SOURCE_COGNITION, payload=_struct({"held": True})
            )
        ]
    )
    assert cognition_results(held) == []
    forge = _reply_result(kunle, _decision("stay at the forge", "Adaeze is counting on me", "run-forge"))
    for tick in (950, 951, 952):  # the same run's result repeated on later ticks
        _tick(recorder, tick, 0, 0, forge)
    crossroads = recorder.moment_records({})[0]
    assert [(d.tick, d.run_id) for d in crossroads.decisions] == [(950, "run-forge")]
