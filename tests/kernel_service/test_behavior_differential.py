"""The behaviour step in C and in numpy produce byte-identical outputs and state (hypothesis).

Through the whole kernel (random personalities, needs, threats and minors, structured goals, merged
cognition results with goals, cognition availability, step cadence and hold window), and through the
layer alone over explicit slot lists with episodes folding into moods.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, common_pb2, kernel_pb2
from kernel_service.agent_state import AgentArrays
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.emotion import EmotionalEpisode
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.vocabulary import MINOR_PRESENT_FLAG, THREAT_FLAG, TRAIT_FIELDS, GoalFamily
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import TickCore, select_core
from kernel_service.tick_log import deterministic_digest
from services.goal_refs import encode_goal_ref
from tests.kernel_service.frames import WORLD, columns

LIBRARY = PersonalityBehaviorLayer().library
GOALS = [
    0,
    encode_goal_ref(GoalFamily.VOCATION, LIBRARY.tag_bit("station-known"), 1),
    encode_goal_ref(GoalFamily.VOCATION, 0, 2),
    encode_goal_ref(GoalFamily.SOCIAL, LIBRARY.tag_bit("relationship-repair"), 3),
    encode_goal_ref(GoalFamily.TRAVEL, LIBRARY.tag_bit("route-known"), 4),
    encode_goal_ref(GoalFamily.SELF_CARE, 0, 5),
    (7 << 28) | 3,  # a family no method decomposes
]
NEARBY, ON_SCREEN = 1 << 5, 1 << 1
FLAGS = [NEARBY, NEARBY, NEARBY | THREAT_FLAG, NEARBY | MINOR_PRESENT_FLAG, ON_SCREEN, 0]
NEEDS = ("need_safety_bp", "need_sustaining_bp", "need_social_bp", "need_purpose_bp", "fatigue_bp")
LEVELS = [0, 2_000, 5_000, 6_500, 9_000]


def registration(rng: np.random.Generator, slot: int) -> kernel_pb2.AgentRegistration:
    domains = rng.choice(np.arange(1, 10), size=int(rng.integers(0, 10)), replace=False)
    return kernel_pb2.AgentRegistration(
        ori=common_pb2.OriRef(tenant_id="t", world_id=WORLD, ori_id=f"ori-{slot}"),
        traits=kernel_pb2.PersonalityTraits(**{f: int(rng.integers(0, 10_001)) for f in TRAIT_FIELDS}),
        values=[
            kernel_pb2.RankedValue(domain=int(d), weight_bp=int(rng.integers(0, 10_001))) for d in domains
        ],
        vocation_ref=int(rng.integers(0, 2)),
    )


def kernel(core: str | TickCore, config: KernelConfig, agents: int, seed: int) -> Kernel:
    k = Kernel(
        config,
        select_core(core) if isinstance(core, str) else core,
        PersonalityBehaviorLayer(config.behavior),
    )
    rng = np.random.default_rng(seed)
    k.register(WORLD, [registration(rng, slot) for slot in range(agents)])
    return k


configs = st.builds(
    lambda every, hold, cooldown, damping: KernelConfig(
        lachesis_step_every_ticks=every,
        cognition_hold_ticks=hold,
        transition_damping_ticks=damping,
        behavior=BehaviorConfig(escalation_cooldown_ticks=cooldown),
    ),
    st.integers(1, 6),  # the C step's bulk change check runs for every <= 4, the per-row one above
    st.sampled_from([0, 1, 3, 6, 1_200]),
    st.sampled_from([1, 5, 2_400]),
    st.integers(0, 2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, agents=st.integers(1, 40), ticks=st.integers(1, 24), seed=st.integers(0, 2**32 - 1))
# Populations past the C step's 512-slot blocks (at every 3, a block begins between two stepped slots).
@example(config=KernelConfig(lachesis_step_every_ticks=2), agents=1_100, ticks=6, seed=3)
@example(
    config=KernelConfig(lachesis_step_every_ticks=3, cognition_hold_ticks=1), agents=1_030, ticks=7, seed=5
)
def test_c_and_numpy_behaviour_steps_are_byte_identical_through_the_kernel(
    config: KernelConfig, agents: int, ticks: int, seed: int
) -> None:
    tick_alike(kernel("c", config, agents, seed), kernel("numpy", config, agents, seed), agents, ticks, seed)


def tick_alike(kernel_c: Kernel, kernel_np: Kernel, agents: int, ticks: int, seed: int) -> None:
    """Ticks both kernels through the same random frames, results and episodes, asserting every tick's
    result and snapshot are byte-identical."""
    rng = np.random.default_rng(seed)  # test data only
    state = {name: rng.choice(LEVELS, agents) for name in NEEDS}
    state["signal_flags"] = rng.choice(FLAGS, agents)
    state["goal_ref"] = rng.choice(GOALS, agents)
    for tick in range(1, ticks + 1):
        # Most rows keep their inputs (they step their cached plans); some change (re-evaluated).
        for values in state.values():
            movers = rng.random(agents) < 0.2
            values[movers] = rng.choice(values, int(movers.sum()))
        state["signal_flags"][rng.random(agents) < 0.1] = rng.choice(FLAGS)
        if rng.random() < 0.3:
            slots = np.sort(rng.choice(agents, int(rng.integers(1, agents + 1)), replace=False))
            batch = columns(tick, slots=slots, **{name: values[slots] for name, values in state.items()})
        else:
            batch = columns(tick, **state)
        merged = [
            action_pb2.ActionIntent(
                slot=int(slot),
                kind=action_pb2.ACTION_KIND_SAY,
                goal_ref=int(rng.choice(GOALS)),
                priority=int(rng.integers(0, 10_001)),
            )
            for slot in rng.choice(agents, int(rng.integers(0, 4)))
        ]
        if rng.random() < 0.2:
            episode = EmotionalEpisode(int(rng.integers(-10_000, 10_001)), int(rng.integers(0, 10_001)), True)
            slot = int(rng.integers(0, agents))
            for k in (kernel_c, kernel_np):
                k.behavior.record_episode(slot, episode)  # type: ignore[union-attr]
        unavailable = int(rng.choice([0, 0, 1 << common_pb2.COGNITION_TIER_LACHESIS, 0b1110]))
        result_c = kernel_c.tick(batch, merged, unavailable)
        result_np = kernel_np.tick(batch, merged, unavailable)
        assert deterministic_digest(result_c) == deterministic_digest(result_np), tick
        assert kernel_c.snapshot().SerializeToString(
            deterministic=True
        ) == kernel_np.snapshot().SerializeToString(deterministic=True), tick


def _layer_and_arrays(core: str, agents: int, seed: int) -> tuple[PersonalityBehaviorLayer, AgentArrays]:
    rng = np.random.default_rng(seed)
    layer = PersonalityBehaviorLayer(BehaviorConfig(escalation_cooldown_ticks=3))
    layer.register(0, [registration(rng, slot) for slot in range(agents)])
    layer.use_core(core)
    arrays = AgentArrays()
    arrays.add(agents)
    return layer, arrays


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agents=st.integers(1, 30), steps=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_c_and_numpy_steps_over_listed_slots_leave_identical_state(
    agents: int, steps: int, seed: int
) -> None:
    (layer_c, arrays_c), (layer_np, arrays_np) = (
        _layer_and_arrays(core, agents, seed) for core in ("c", "numpy")
    )
    rng = np.random.default_rng(seed)  # test data only
    for tick in range(steps):
        slots = np.sort(rng.choice(agents, int(rng.integers(0, agents + 1)), replace=False)).astype(np.uint32)
        tier = rng.choice([1, 2, 2, 3], agents).astype(np.uint8)
        changed = {name: rng.choice(LEVELS, agents) for name in NEEDS}
        changed["signal_flags"] = rng.choice(FLAGS, agents)
        changed["goal_ref"] = rng.choice(GOALS, agents)
        movers = rng.random(agents) < 0.4
        cognition = rng.random(agents) < 0.2
        for arrays in (arrays_c, arrays_np):
            f = arrays.fields
            f["tier"][:agents] = tier
            for name, values in changed.items():
                f[name][:agents][movers] = values[movers]
            f["cached_source"][:agents][cognition] = action_pb2.ACTION_SOURCE_COGNITION
        hold_until = tick + rng.integers(0, 3, agents)
        for layer in (layer_c, layer_np):
            for slot in np.flatnonzero(cognition):
                layer.adopt(int(slot), int(changed["goal_ref"][slot]), int(hold_until[slot]))
            if tick == 1:
                layer.record_episode(0, EmotionalEpisode(-9_000, 8_000, loss=True))
        available = bool(rng.random() < 0.7)
        esc_c = layer_c.step(tick, 1, arrays_c, available, slots=slots)
        esc_np = layer_np.step(tick, 1, arrays_np, available, slots=slots)
        assert esc_c.slots.tolist() == esc_np.slots.tolist()
        assert esc_c.causes.tolist() == esc_np.causes.tolist()
        assert esc_c.slots.tolist() == sorted(esc_c.slots.tolist())
        for name in arrays_c.fields:
            assert np.array_equal(arrays_c.fields[name], arrays_np.fields[name]), name
        snap_c, snap_np = layer_c.snapshot(), layer_np.snapshot()
        for name, values in snap_c.items():
            assert np.array_equal(values, snap_np[name]), name


def test_the_c_steps_named_numbers_are_the_protocols_and_the_vocabularys() -> None:
    from kernel_service._core import lib
    from kernel_service.agent_state import AGENT_BIT_FRESH_DECISION
    from kernel_service.behavior import goal_refs
    from kernel_service.behavior.vocabulary import Emotion, Need, Routine, Trait

    expected = {
        "MB_TIER_LACHESIS": common_pb2.COGNITION_TIER_LACHESIS,
        "MB_SOURCE_BEHAVIOR_TREE": action_pb2.ACTION_SOURCE_BEHAVIOR_TREE,
        "MB_SOURCE_HTN": action_pb2.ACTION_SOURCE_HTN,
        "MB_SOURCE_COGNITION": action_pb2.ACTION_SOURCE_COGNITION,
        "MB_CAUSE_NOVELTY": action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY,
        "MB_CAUSE_NO_GOAL": action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL,
        "MB_CAUSE_NO_METHOD": action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD,
        "MB_BIT_FRESH_DECISION": AGENT_BIT_FRESH_DECISION,
        "MB_THREAT_FLAG": THREAT_FLAG,
        "MB_MINOR_PRESENT_FLAG": MINOR_PRESENT_FLAG,
        "MB_DOMAIN_CHILD_SAFETY": kernel_pb2.VALUE_DOMAIN_CHILD_SAFETY,
        "MB_DOMAIN_SAFETY": kernel_pb2.VALUE_DOMAIN_SAFETY,
        "MB_FAMILY_VOCATION": GoalFamily.VOCATION,
        "MB_NEED_PURPOSE": Need.PURPOSE,
        "MB_GOAL_FAMILY_SHIFT": goal_refs.FAMILY_SHIFT,
        "MB_GOAL_TAG_SHIFT": goal_refs.TAG_SHIFT,
        "MB_GOAL_TAG_MASK": goal_refs.TAG_MASK,
        "MB_ROUTINES": len(Routine),
    }
    expected |= {f"MB_ROUTINE_{r.name}": r for r in Routine if r != Routine.NONE}
    expected |= {f"MB_EMOTION_{e.name}": e for e in Emotion if e != Emotion.NONE}
    expected |= {f"MB_TRAIT_{t.name}": t for t in Trait if hasattr(lib, f"MB_TRAIT_{t.name}")}
    assert {name: getattr(lib, name) for name in expected} == {name: int(v) for name, v in expected.items()}
