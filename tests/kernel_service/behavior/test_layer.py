"""PersonalityBehaviorLayer through the kernel's seam: plans, preemption, snapshots, equivalence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.behavior.emotion import EmotionalEpisode, Mood, evaluate_emotion
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.personality_tree import TreeInputs, evaluate_personality_tree
from kernel_service.behavior.profile import profile_from_registration
from kernel_service.behavior.vocabulary import (
    MINOR_PRESENT_FLAG,
    THREAT_FLAG,
    TRAIT_FIELDS,
    GoalFamily,
    Routine,
)
from kernel_service.behavior_seam import BehaviorDecisions, BehaviorLayer, BehaviorSignals
from services.errors import InvalidArgument
from services.goal_refs import encode_goal_ref

A = action_pb2
D = kernel_pb2.ValueDomain


def _registration(**kw: object) -> kernel_pb2.AgentRegistration:
    return kernel_pb2.AgentRegistration(
        traits=kernel_pb2.PersonalityTraits(conscientiousness_bp=9000, ambition_bp=8000, caution_bp=5000),
        values=[
            kernel_pb2.RankedValue(domain=D.VALUE_DOMAIN_CRAFT, weight_bp=9000),
            kernel_pb2.RankedValue(domain=D.VALUE_DOMAIN_CHILD_SAFETY, weight_bp=9500),
        ],
        quirks=["vocation:hums"],
        vocation_ref=1,
        **kw,  # type: ignore[arg-type]
    )


def _signals(n: int) -> BehaviorSignals:
    zeros = [np.zeros(n, dtype=np.uint16) for _ in range(6)]
    return BehaviorSignals(*zeros, goal_ref=np.zeros(n, dtype=np.uint32))


def _out(n: int) -> BehaviorDecisions:
    return BehaviorDecisions(
        np.zeros(n, np.uint8),
        np.zeros(n, np.uint8),
        np.zeros(n, np.uint32),
        np.zeros(n, np.uint16),
        np.zeros(n, np.uint16),
    )


def _layer(n: int) -> PersonalityBehaviorLayer:
    layer = PersonalityBehaviorLayer(capacity=2)
    layer.register(0, [_registration() for _ in range(n)])
    return layer


def test_it_is_the_kernels_behavior_layer() -> None:
    layer: BehaviorLayer = PersonalityBehaviorLayer()
    assert layer is not None


def test_known_worksite_steps_the_compiled_rich_plan_and_starts_over() -> None:
    layer, signals, out = _layer(1), _signals(1), _out(1)
    signals.goal_ref[0] = encode_goal_ref(GoalFamily.VOCATION, layer.library.tag_bit("station-known"), 9)
    kinds, steps = [], []
    for _ in range(6):
        layer.decide(np.array([0], dtype=np.uint32), signals, out)
        assert out.source[0] == A.ACTION_SOURCE_HTN
        assert out.goal_ref[0] == signals.goal_ref[0]
        kinds.append(int(out.kind[0]))
        steps.append(int(out.plan_step[0]))
    assert kinds == [
        A.ACTION_KIND_OBSERVE,
        A.ACTION_KIND_USE_PROP,
        A.ACTION_KIND_WORK,
        A.ACTION_KIND_OBSERVE,
        A.ACTION_KIND_FORM_MEMORY,
        A.ACTION_KIND_OBSERVE,
    ]
    assert steps == [0, 1, 2, 3, 4, 0]
    assert layer.report(0).method_id == "vocation.station-work"


def test_unknown_worksite_takes_practice_and_a_new_goal_replans_from_step_zero() -> None:
    layer, signals, out = _layer(1), _signals(1), _out(1)
    slots = np.array([0], dtype=np.uint32)
    signals.goal_ref[0] = encode_goal_ref(GoalFamily.VOCATION, 0, 1)
    layer.decide(slots, signals, out)
    layer.decide(slots, signals, out)
    assert layer.report(0).method_id == "vocation.low-risk-practice"
    assert out.plan_step[0] == 1
    signals.goal_ref[0] = encode_goal_ref(GoalFamily.SOCIAL, layer.library.tag_bit("relationship-repair"), 2)
    layer.decide(slots, signals, out)
    assert (layer.report(0).method_id, int(out.plan_step[0]), int(out.kind[0])) == (
        "social.relationship-repair",
        0,
        A.ACTION_KIND_SELF_CARE,
    )


def test_a_minor_present_preempts_the_plan_with_maintain_safety_and_the_plan_resumes() -> None:
    layer, signals, out = _layer(1), _signals(1), _out(1)
    slots = np.array([0], dtype=np.uint32)
    signals.goal_ref[0] = encode_goal_ref(GoalFamily.TRAVEL, layer.library.tag_bit("route-known"), 3)
    layer.decide(slots, signals, out)
    signals.signal_flags[0] = MINOR_PRESENT_FLAG
    layer.decide(slots, signals, out)
    assert (out.kind[0], out.source[0]) == (A.ACTION_KIND_MAINTAIN_SAFETY, A.ACTION_SOURCE_BEHAVIOR_TREE)
    report = layer.report(0)
    assert (report.routine, report.honoured_value) == (Routine.MAINTAIN_SAFETY, D.VALUE_DOMAIN_CHILD_SAFETY)
    signals.signal_flags[0] = 0
    layer.decide(slots, signals, out)
    assert out.source[0] == A.ACTION_SOURCE_HTN


def test_a_threat_with_no_applicable_method_falls_to_the_tree() -> None:
    registration = _registration()
    del registration.values[:]
    layer = PersonalityBehaviorLayer()
    layer.register(0, [registration])
    signals, out = _signals(1), _out(1)
    signals.goal_ref[0] = encode_goal_ref(GoalFamily.VOCATION, layer.library.tag_bit("station-known"), 3)
    signals.signal_flags[0] = THREAT_FLAG
    layer.decide(np.array([0], dtype=np.uint32), signals, out)
    assert out.source[0] == A.ACTION_SOURCE_BEHAVIOR_TREE
    assert layer.report(0).method_id is None
    assert not layer.method_applies(np.array([0], dtype=np.uint32))[0]


def test_an_unmet_need_becomes_an_autonomous_goal_the_planner_decomposes() -> None:
    layer, signals, out = _layer(1), _signals(1), _out(1)
    signals.fatigue_bp[0] = 6500
    signals.need_sustaining_bp[0] = 8000
    layer.decide(np.array([0], dtype=np.uint32), signals, out)
    report = layer.report(0)
    assert report.method_id == "self-care.rest"
    assert out.goal_ref[0] != 0
    assert (out.source[0], out.kind[0]) == (A.ACTION_SOURCE_HTN, A.ACTION_KIND_MOVE)


def test_grief_is_legible_and_down_weights_vocation() -> None:
    layer, signals, out = _layer(2), _signals(2), _out(2)
    signals.goal_ref[:] = encode_goal_ref(GoalFamily.VOCATION, layer.library.tag_bit("station-known"), 1)
    layer.record_episode(1, EmotionalEpisode(-9000, 2000, loss=True))
    layer.decide(np.array([0, 1], dtype=np.uint32), signals, out)
    mourner = layer.report(1)
    assert (mourner.emotion.name, mourner.dialogue_style, mourner.animation_tag) == (
        "GRIEVING",
        "quiet",
        "head_bowed",
    )
    assert int(out.priority[1]) == int(out.priority[0]) * 4_000 // 10_000 == 3_600


def test_registration_is_validated_whole_and_applies_nothing_on_error() -> None:
    layer = PersonalityBehaviorLayer()
    bad = _registration()
    bad.traits.warmth_bp = 10_001
    bad.values.append(kernel_pb2.RankedValue(domain=D.VALUE_DOMAIN_CRAFT, weight_bp=1))
    with pytest.raises(InvalidArgument) as refused:
        layer.register(0, [_registration(), bad])
    assert [v.field for v in refused.value.violations] == [
        "agents[1].traits.warmth_bp",
        "agents[1].values[2].domain",
    ]
    assert not layer.registered.any()


def test_snapshot_restore_reproduces_the_future() -> None:
    layer, signals, out = _layer(3), _signals(3), _out(3)
    slots = np.arange(3, dtype=np.uint32)
    signals.goal_ref[1] = encode_goal_ref(GoalFamily.VOCATION, layer.library.tag_bit("station-known"), 1)
    layer.record_episode(2, EmotionalEpisode(-9000, 2000, loss=True))
    layer.decide(slots, signals, out)
    snapshot = layer.snapshot()
    other = PersonalityBehaviorLayer()
    other.restore(snapshot)
    out_other = _out(3)
    for _ in range(7):
        layer.decide(slots, signals, out)
        other.decide(slots, signals, out_other)
        for name in ("kind", "source", "goal_ref", "plan_step", "priority"):
            assert np.array_equal(getattr(out, name), getattr(out_other, name))
    assert other.report(0).quirks == ("vocation:hums",)
    broken = dict(snapshot)
    del broken["plan_cursor"]
    with pytest.raises(InvalidArgument, match="plan_cursor"):
        other.restore(broken)


registrations = st.builds(
    lambda traits, values, voc: kernel_pb2.AgentRegistration(
        traits=kernel_pb2.PersonalityTraits(**dict(zip(TRAIT_FIELDS, traits, strict=True))),
        values=[kernel_pb2.RankedValue(domain=d, weight_bp=w) for d, w in values.items()],
        vocation_ref=voc,
    ),
    st.tuples(*[st.integers(0, 10_000)] * 8),
    st.dictionaries(st.integers(1, 9), st.integers(0, 10_000), max_size=9),
    st.integers(0, 1),
)
frames = st.tuples(
    *[st.integers(0, 10_000)] * 5, st.sampled_from([0, THREAT_FLAG, MINOR_PRESENT_FLAG]), st.booleans()
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(registrations, st.lists(frames, min_size=1, max_size=4)), min_size=1, max_size=12))
def test_layer_decisions_equal_the_scalar_reference_every_tick(
    agents: list[tuple[kernel_pb2.AgentRegistration, list[tuple[int, int, int, int, int, int, bool]]]],
) -> None:
    n = len(agents)
    layer = PersonalityBehaviorLayer()
    layer.register(0, [r for r, _ in agents])
    moods = [Mood() for _ in range(n)]
    for slot, (_, _) in enumerate(agents):
        if slot % 3 == 0:
            episode = EmotionalEpisode(-8000, 7000, loss=slot % 2 == 0)
            layer.record_episode(slot, episode)
            moods[slot] = moods[slot].fold(episode)
    ticks = max(len(f) for _, f in agents)
    signals, out = _signals(n), _out(n)
    for tick in range(ticks):
        for slot, (_, script) in enumerate(agents):
            s, su, so, p, f, fl, _ = script[min(tick, len(script) - 1)]
            signals.need_safety_bp[slot], signals.need_sustaining_bp[slot] = s, su
            signals.need_social_bp[slot], signals.need_purpose_bp[slot] = so, p
            signals.fatigue_bp[slot], signals.signal_flags[slot] = f, fl
        layer.decide(np.arange(n, dtype=np.uint32), signals, out)
        for slot, (registration, script) in enumerate(agents):
            s, su, so, p, f, fl, _ = script[min(tick, len(script) - 1)]
            emotion = evaluate_emotion(moods[slot], (s, su, so, p), f, layer.config)
            moods[slot] = moods[slot].decayed(layer.config.mood_decay_shift)
            expected = evaluate_personality_tree(
                profile_from_registration(registration),
                TreeInputs(s, su, so, p, f, fl, emotion.hard_objective_bp),
                layer.config,
            )
            report = layer.report(slot)
            assert (report.routine, report.honoured_value, report.emotion) == (
                expected.routine,
                expected.honoured_value,
                emotion.emotion,
            )
            # Every agent gets an in-character action every tick.
            assert out.kind[slot] != A.ACTION_KIND_UNSPECIFIED
            assert out.source[slot] in (A.ACTION_SOURCE_HTN, A.ACTION_SOURCE_BEHAVIOR_TREE)
            if out.source[slot] == A.ACTION_SOURCE_BEHAVIOR_TREE:
                assert out.kind[slot] == expected.action_kind


def test_same_inputs_same_outputs_for_scattered_slots() -> None:
    outs = []
    for _ in range(2):
        layer, signals, out = _layer(8), _signals(8), _out(8)
        signals.need_social_bp[:] = np.arange(8) * 1200
        slots = np.array([6, 1, 4], dtype=np.uint32)
        for _ in range(3):
            layer.decide(slots, signals, out)
        outs.append((out.kind.copy(), out.plan_step.copy(), out.goal_ref.copy()))
        assert (out.kind[[0, 2, 3, 5, 7]] == 0).all()  # rows not asked for are untouched
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a, b)


@settings(max_examples=25, deadline=None)  # a loaded shared machine is not a regression
@given(st.integers(0, 3), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_evenly_spaced_slots_decide_as_each_slot_alone(first: int, step: int, seed: int) -> None:
    """The kernel's usual stepped set (every step-th slot) is read through strided views, not
    gathers; the decisions and state are those of deciding each slot on its own."""
    n = 24
    rng = np.random.default_rng(seed)
    slots = np.arange(first, n, step, dtype=np.uint32)
    together, alone = _layer(n), _layer(n)
    signals, out_together, out_alone = _signals(n), _out(n), _out(n)
    for _ in range(3):
        for array in (signals.need_safety_bp, signals.need_social_bp, signals.fatigue_bp):
            array[:] = rng.integers(0, 10_001, n)
        signals.signal_flags[:] = rng.choice([0, THREAT_FLAG, MINOR_PRESENT_FLAG], n)
        together.decide(slots, signals, out_together)
        for slot in slots:
            alone.decide(np.array([slot], dtype=np.uint32), signals, out_alone)
    for name in ("kind", "source", "goal_ref", "plan_step", "priority"):
        assert np.array_equal(getattr(out_together, name), getattr(out_alone, name)), name
    for name, values in together.snapshot().items():
        assert np.array_equal(values, alone.snapshot()[name]), name


def test_restore_refuses_quirks_that_are_not_text() -> None:
    snapshot = dict(_layer(1).snapshot())
    snapshot["quirks"] = np.zeros(len(snapshot["quirks"]), dtype=np.uint8)
    with pytest.raises(InvalidArgument, match="quirks"):
        PersonalityBehaviorLayer().restore(snapshot)
