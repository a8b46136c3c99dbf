"""A call's moment: the situation text and the kernel's values for its slot on the issuing tick."""

from __future__ import annotations

import pytest

from egbe.v1 import action_pb2, biography_pb2, kernel_pb2, perception_pb2
from kernel_service.behavior.htn import load_method_library
from kernel_service.behavior.vocabulary import GoalFamily
from kernel_service.kernel import Kernel
from services.goal_refs import encode_goal_ref
from tests.kernel_service.frames import CORES, WORLD, frame, make_kernel, registrations, rows

LIBRARY = load_method_library()
STATION_WORK = encode_goal_ref(GoalFamily.VOCATION, LIBRARY.tag_bit("station-known"), 1)
RESIDENT = action_pb2.TIER_REASON_RESIDENT_WORLD


def said_to(slot: int, text: str, **more: object) -> perception_pb2.SituationText:
    return perception_pb2.SituationText(
        slot=slot,
        player_line=perception_pb2.SpokenLine(speaker_id="player-1", speaker_name="the traveller", text=text),
        **more,  # type: ignore[arg-type]
    )


def moments_of(kernel: Kernel, result: action_pb2.TickResult) -> dict[int, action_pb2.CallMoment]:
    moments = kernel.capture_moments()
    filled = {}
    for index, candidate in enumerate(result.candidates):
        filled[candidate.slot] = action_pb2.CallMoment()
        moments.fill(index, filled[candidate.slot])
    return filled


def resident(slot: int, **signals: object) -> perception_pb2.PerceptionFrame:
    return frame(
        slot, player_nearby_in_world=True, goal_ref=STATION_WORK, player_proximity_mm=40_000, **signals
    )


@pytest.mark.parametrize("core", CORES)
def test_a_dialogue_moment_carries_the_line_the_plan_step_and_the_threat(core: str) -> None:
    kernel = make_kernel(3, core, behavior=True)
    batch = [resident(0), resident(1), resident(2, threat_present=True)]
    for tick in range(1, 4):
        kernel.tick(rows(tick, batch))
    kunle = said_to(1, "Is the forge hot yet?", place="the forge", nearby=["Tobi", "Adaeze"])
    tobi = said_to(2, "Run!")
    result = kernel.tick(
        perception_pb2.PerceptionBatch(world_id=WORLD, tick=4, frames=batch, situations=[kunle, tobi])
    )
    # Slot 2's arbitration escalation became its dialogue call; slot 1 had none and got one.
    assert [(c.slot, c.cause) for c in result.candidates] == [
        (2, action_pb2.COGNITION_CAUSE_DIALOGUE),
        (1, action_pb2.COGNITION_CAUSE_DIALOGUE),
    ]
    moments = moments_of(kernel, result)
    assert moments[1] == action_pb2.CallMoment(
        situation=kunle,
        player_proximity_mm=40_000,
        emotion="calm",
        goal_ref=STATION_WORK,
        goal="vocation: station-known",
        plan_step=1,
        plan_step_name="gather-tools",  # the HTN step the Ori answered with this tick
        tier_reason=RESIDENT,
    )
    assert moments[2] == action_pb2.CallMoment(
        situation=tobi,
        player_proximity_mm=40_000,
        threat_present=True,
        emotion="calm",
        goal_ref=STATION_WORK,
        goal="vocation: station-known",
        tier_reason=RESIDENT,  # maintaining safety: a tree routine, no plan step
    )
    # The world's result never carries a moment.
    assert not any(c.HasField("moment") for c in result.candidates)


@pytest.mark.parametrize("core", CORES)
def test_a_moment_names_the_guard_that_fired_and_the_needs(core: str) -> None:
    kernel = make_kernel(1, core, behavior=True)
    needs = {
        "need_safety_bp": 1_200,
        "need_sustaining_bp": 2_300,
        "need_social_bp": 3_400,
        "need_purpose_bp": 4_500,
        "fatigue_bp": 9_000,
        "minor_present": True,
    }
    for tick in range(1, 6):
        kernel.tick(rows(tick, [resident(0, **needs)]))
    line = said_to(0, "You look tired.")
    batch = rows(6, [resident(0, **needs)])
    batch.situations.append(line)
    result = kernel.tick(batch)  # the goal has been held six ticks without progress: stale
    assert result.report.guard_interventions == 1
    [moment] = moments_of(kernel, result).values()
    assert moment == action_pb2.CallMoment(
        situation=line,
        player_proximity_mm=40_000,
        need_safety_bp=1_200,
        need_sustaining_bp=2_300,
        need_social_bp=3_400,
        need_purpose_bp=4_500,
        fatigue_bp=9_000,
        minor_present=True,
        emotion="tired",
        goal_ref=STATION_WORK,
        goal="vocation: station-known",
        plan_step=moment.plan_step,  # the rewritten action keeps the cached step, but names none
        tier_reason=RESIDENT,
        guards=["stale-goal"],
    )


def test_without_a_behaviour_layer_a_moment_has_no_emotion_and_the_perceived_goal() -> None:
    kernel = make_kernel(2, "c")
    batch = rows(1, [resident(0), resident(1)])
    batch.situations.append(said_to(0, "Hello."))
    result = kernel.tick(batch)
    moment = moments_of(kernel, result)[0]
    # No layer chose an action goal: the perceived one stands, named by family (no tag vocabulary).
    assert (moment.goal_ref, moment.goal) == (STATION_WORK, "vocation")
    assert (moment.emotion, moment.plan_step_name) == ("", "")
    assert moment.situation.player_line.text == "Hello."


def test_a_moment_without_situation_text_has_none() -> None:
    kernel = make_kernel(2, "c")
    result = kernel.tick(rows(1, [frame(0, on_screen=True), frame(1)]))
    assert [c.slot for c in result.candidates] == [0]
    assert not moments_of(kernel, result)[0].HasField("situation")


def test_an_identity_gives_the_ori_a_display_name_for_logs() -> None:
    kernel = make_kernel(0)
    agents = registrations(3)
    agents[1].identity.display_name = "Adaeze"
    kernel.register(WORLD, agents)
    assert kernel.display_names == ["", "Adaeze", ""]
    renamed = kernel_pb2.AgentRegistration(
        ori=agents[1].ori, identity=biography_pb2.OriIdentity(display_name="Adaeze the weaver")
    )
    kernel.register(WORLD, [renamed, *registrations(1, start=3)])
    assert kernel.display_names == ["", "Adaeze the weaver", "", ""]
    batch = rows(1, [frame(s) for s in range(4)])
    batch.situations.append(said_to(1, "Good day."))
    kernel.tick(batch)
    assert kernel.capture_moments().display_name(0) == "Adaeze the weaver"
