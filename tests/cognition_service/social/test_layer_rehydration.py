"""SocialLayer appends every state change; rehydrating from those events restores the state."""

from __future__ import annotations

from cognition_service.social.crossroads import Bond, Counsel, Crossroads, CrossroadsOption
from cognition_service.social.goal_arcs import GoalArc, GoalStage, Session, StageStatus
from cognition_service.social.layer import SocialLayer
from cognition_service.social.learning import Demonstration
from cognition_service.social.life_arcs import LifeArc, LivedSession
from cognition_service.social.objectives import ExecutionMode, Objective, OriContext
from cognition_service.social.rehydration import rehydrate
from cognition_service.social.values import Domain, RankedValues
from tests.cognition_service.social.doubles import RecordingAppender, ScriptedPolicy, seed


async def test_every_change_is_appended_and_rehydrates() -> None:
    appender = RecordingAppender()
    social = SocialLayer(appender, ScriptedPolicy("allow"))
    values = RankedValues.of({Domain.CRAFT: 70, Domain.KINSHIP: 60, Domain.AUTONOMY: 80})
    ori = OriContext("a", values)

    await social.assign_objective(ori, Objective("o-1", "s", "mend nets", "harbour", ExecutionMode.BRIEF), 1)
    await social.assign_objective(
        ori, Objective("o-2", "s", "lie to kin", "kin", ExecutionMode.FREE, {Domain.KINSHIP: -100}), 2
    )
    learned = await social.learn_from_demonstration(
        "a", values, Demonstration("s", "taught", {Domain.CRAFT: 40}), 3
    )
    arc = GoalArc(
        "arc", "a", (GoalStage("one", StageStatus.ACTIVE), GoalStage("two", needs_support=frozenset({"x"})))
    )
    arc = (await social.advance_goal_arc(arc, Session("a", 4, completed_active=True))).arc
    arc = (await social.advance_goal_arc(arc, Session("a", 5, emergent_goals=["three"]))).arc
    life = LifeArc("a")
    for tick in range(6, 10):
        life = (
            await social.advance_life_arc(life, learned.values, LivedSession(tick, {Domain.CRAFT: 90}))
        ).arc
    fork = Crossroads("cr", [CrossroadsOption("go"), CrossroadsOption("stay", {Domain.KINSHIP: 50})], 0, 100)
    await social.resolve_crossroads(
        "a", values, fork, bond=Bond("s", 80, 80), counsel=Counsel("s", "go"), now_tick=10
    )
    await social.seed_relationship(seed(frozenset({"friendship"}), False, False))

    mine = [event for ori_id, event in appender.appended if ori_id == "a"]
    assert len(mine) == 2 + 2 + 2 + 4 + 1 + 1
    restored = rehydrate("a", mine)
    assert restored.values == learned.values
    assert restored.goal_arcs == {"arc": arc}
    assert restored.life_arc == life
    assert restored.objectives == {"o-1": "accept", "o-2": "refuse"}
    assert restored.crossroads == {"cr": "stay"}
    assert restored.relationships == {"b": "bond"}
