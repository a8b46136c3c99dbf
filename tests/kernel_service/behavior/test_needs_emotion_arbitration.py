"""Needs → goals, emotion and arbitration: vectorized forms equal the scalar references; invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kernel_service.behavior.arbitration import Arbitration, arbitrate, arbitrate_rows
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.emotion import (
    EMOTION_STYLES,
    EmotionalEpisode,
    Mood,
    MoodRows,
    evaluate_emotion,
    evaluate_emotions,
)
from kernel_service.behavior.htn import load_method_library
from kernel_service.behavior.needs import NeedGoals, most_pressing_need, most_pressing_needs, surface_goals
from kernel_service.behavior.vocabulary import Emotion, GoalFamily, Need
from services.goal_refs import goal_family, goal_tags

CONFIG = BehaviorConfig()
LIBRARY = load_method_library()
GOALS = NeedGoals.for_library(LIBRARY)
bp = st.one_of(st.integers(0, 10_000), st.sampled_from([0, 4_999, 5_000, 6_000, 10_000]))


@given(st.lists(st.tuples(st.tuples(bp, bp, bp, bp), st.integers(0, 2)), min_size=1, max_size=30))
def test_vectorized_need_goals_equal_scalar(rows: list[tuple[tuple[int, int, int, int], int]]) -> None:
    pressures = np.array([p for p, _ in rows], dtype=np.uint16)
    vocation = np.array([v for _, v in rows], dtype=np.uint32)
    needs = most_pressing_needs(pressures, CONFIG.need_goal_threshold_bp)
    refs = surface_goals(needs, vocation, GOALS)
    for i, (p, v) in enumerate(rows):
        need = most_pressing_need(p, CONFIG.need_goal_threshold_bp)
        assert needs[i] == need
        assert refs[i] == (GOALS.goal_for(need, v != 0) if need else 0)


def test_needs_become_decomposable_goals() -> None:
    assert most_pressing_need((6000, 6000, 9000, 0), 5000) == Need.SOCIAL
    assert most_pressing_need((7000, 7000, 0, 0), 5000) == Need.SAFETY  # ties: safety first
    assert most_pressing_need((4999, 0, 0, 0), 5000) == Need.NONE
    safety = GOALS.goal_for(Need.SAFETY, False)
    assert goal_family(safety) == GoalFamily.TRAVEL
    assert goal_tags(safety) == LIBRARY.tag_bit("seek-safety")
    chosen = LIBRARY.decompose(goal_family(safety), goal_tags(safety))
    assert chosen is not None
    assert chosen[1].method_id == "travel.seek-shelter"
    with_station = GOALS.goal_for(Need.PURPOSE, True)
    assert LIBRARY.decompose(goal_family(with_station), goal_tags(with_station))[1].method_id == (  # type: ignore[index]
        "vocation.station-work"
    )


moods = st.builds(Mood, st.integers(-10_000, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))


@given(st.lists(st.tuples(moods, st.tuples(bp, bp, bp, bp), bp), min_size=1, max_size=30))
def test_vectorized_emotions_equal_scalar(rows: list[tuple[Mood, tuple[int, int, int, int], int]]) -> None:
    got = evaluate_emotions(
        MoodRows(
            np.array([m.valence_bp for m, _, _ in rows], dtype=np.int32),
            np.array([m.arousal_bp for m, _, _ in rows], dtype=np.int32),
            np.array([m.grief_bp for m, _, _ in rows], dtype=np.int32),
        ),
        np.array([n for _, n, _ in rows], dtype=np.uint16),
        np.array([f for _, _, f in rows], dtype=np.uint16),
        CONFIG,
    )
    for i, (mood, needs, fatigue) in enumerate(rows):
        state = evaluate_emotion(mood, needs, fatigue, CONFIG)
        assert got.emotion[i] == state.emotion
        assert got.hard_objective_bp[i] == state.hard_objective_bp


def test_named_emotions_carry_style_animation_and_multiplier() -> None:
    grieving = evaluate_emotion(
        Mood().fold(EmotionalEpisode(-9000, 3000, loss=True)), (0, 0, 0, 0), 0, CONFIG
    )
    assert (grieving.emotion, grieving.dialogue_style, grieving.animation_tag) == (
        Emotion.GRIEVING,
        "quiet",
        "head_bowed",
    )
    assert grieving.hard_objective_bp == CONFIG.grieving_hard_objective_bp
    anxious = evaluate_emotion(Mood(), (9000, 0, 0, 0), 0, CONFIG)
    assert anxious.emotion == Emotion.ANXIOUS
    assert anxious.hard_objective_bp == CONFIG.anxious_hard_objective_bp
    assert evaluate_emotion(Mood(), (0, 0, 0, 0), 8000, CONFIG).emotion == Emotion.TIRED
    assert evaluate_emotion(Mood(), (0, 0, 8000, 0), 0, CONFIG).emotion == Emotion.LONELY
    assert evaluate_emotion(Mood(2000, 8000, 0), (0, 0, 0, 0), 0, CONFIG).emotion == Emotion.DETERMINED
    assert evaluate_emotion(Mood(1000, 0, 0), (0, 0, 0, 0), 0, CONFIG).emotion == Emotion.CONTENT
    calm = evaluate_emotion(Mood(), (3000, 3000, 0, 0), 0, CONFIG)
    assert calm.emotion == Emotion.CALM
    assert calm.hard_objective_bp == 10_000
    assert set(EMOTION_STYLES) == set(Emotion) - {Emotion.NONE}


def test_grief_fades_as_mood_decays() -> None:
    mood = Mood().fold(EmotionalEpisode(-10_000, 0, loss=True))
    steps = 0
    while mood.grief_bp >= CONFIG.grief_bp:
        mood = mood.decayed(CONFIG.mood_decay_shift)
        steps += 1
    assert 1 <= steps <= 10


flags = st.booleans()


@given(flags, flags, flags)
def test_arbitration_never_escalates_when_cognition_is_unavailable(
    novelty: bool, goal: bool, method: bool
) -> None:
    assert arbitrate(False, novelty, goal, method) == Arbitration.BEHAVIOR_TREE


@given(st.lists(st.tuples(flags, flags, flags, flags), min_size=1, max_size=30))
def test_vectorized_arbitration_equals_scalar(rows: list[tuple[bool, bool, bool, bool]]) -> None:
    columns = [np.array(c, dtype=np.bool_) for c in zip(*rows, strict=True)]
    got = arbitrate_rows(*columns)
    assert got.tolist() == [arbitrate(*r) for r in rows]
    unavailable = ~columns[0]
    assert (got[unavailable] == Arbitration.BEHAVIOR_TREE).all()


def test_arbitration_table() -> None:
    assert arbitrate(True, True, True, True) == Arbitration.COGNITION
    assert arbitrate(True, False, False, False) == Arbitration.COGNITION
    assert arbitrate(True, False, True, True) == Arbitration.HTN_PLAN
    assert arbitrate(True, False, True, False) == Arbitration.COGNITION
