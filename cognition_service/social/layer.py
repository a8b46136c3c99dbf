"""`SocialLayer`: the cognition service's entry point; decides, then appends every state change as events."""

from __future__ import annotations

from collections.abc import Sequence

from cognition_service.errors import CoerciveDemonstration
from cognition_service.social.catalyst import CatalystResult, RelationshipSeed, seed_relationship
from cognition_service.social.config import SocialConfig
from cognition_service.social.crossroads import (
    Bond,
    Counsel,
    Crossroads,
    CrossroadsResolution,
    resolve_crossroads,
)
from cognition_service.social.goal_arcs import ArcAdvance, GoalArc, Session, advance_goal_arc
from cognition_service.social.learning import Demonstration, Learning, learn_from_demonstration
from cognition_service.social.life_arcs import LifeArc, LifeArcAdvance, LivedSession, advance_life_arc
from cognition_service.social.objectives import Assignment, Objective, OriContext, assign_objective
from cognition_service.social.ports import EventAppender, SocialPolicyClient
from cognition_service.social.values import RankedValues
from egbe.v1 import biography_pb2, policy_pb2


def coercion_name(kind: policy_pb2.CoercionKind.ValueType) -> str:
    """ "forced-action", "force-past-refusal", … from the protocol's CoercionKind."""
    return policy_pb2.CoercionKind.Name(kind).removeprefix("COERCION_KIND_").lower().replace("_", "-")


class SocialLayer:
    """Pure decisions from the sibling modules, written to the biography through the injected appender."""

    def __init__(
        self, appender: EventAppender, policy: SocialPolicyClient, config: SocialConfig | None = None
    ) -> None:
        self.config = config or SocialConfig()
        self._appender = appender
        self._policy = policy

    async def _record(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        if events:
            await self._appender.append(ori_id, events)

    async def assign_objective(self, ori: OriContext, objective: Objective, tick: int) -> Assignment:
        """The policy service's coercion policy reads the objective's words first: a coercive objective
        is refused (and never echoed). Unanswered, nothing is decided or written."""
        verdict = await self._policy.classify_steward_text(
            policy_pb2.ClassifyStewardTextRequest(
                texts=[
                    policy_pb2.StewardText(field=f"objective.{name}", text=text)
                    for name, text in objective.steward_texts()
                ]
            )
        )
        coercion = coercion_name(verdict.kind) if verdict.coercive else ""
        result = assign_objective(ori, objective, self.config, tick, coercion=coercion)
        await self._record(ori.ori_id, result.events)
        return result

    async def learn_from_demonstration(
        self, ori_id: str, values: RankedValues, demonstration: Demonstration, tick: int
    ) -> Learning:
        """The same coercion policy reads the demonstrated behaviour first: a coercive one teaches
        nothing and is refused (CoerciveDemonstration). Unanswered, nothing is decided or written."""
        verdict = await self._policy.classify_steward_text(
            policy_pb2.ClassifyStewardTextRequest(
                texts=[policy_pb2.StewardText(field="behaviour", text=demonstration.behaviour)]
            )
        )
        if verdict.coercive:
            raise CoerciveDemonstration(coercion_name(verdict.kind), [f.rule for f in verdict.findings])
        result = learn_from_demonstration(ori_id, values, demonstration, self.config, tick)
        await self._record(ori_id, [*result.value_shifts, result.behaviour_adjustment])
        return result

    async def advance_goal_arc(self, arc: GoalArc, session: Session) -> ArcAdvance:
        result = advance_goal_arc(arc, session)
        await self._record(arc.owner_ori_id, result.events)
        return result

    async def advance_life_arc(
        self, arc: LifeArc, values: RankedValues, session: LivedSession
    ) -> LifeArcAdvance:
        result = advance_life_arc(arc, values, session, self.config)
        await self._record(arc.ori_id, result.events)
        return result

    async def resolve_crossroads(
        self,
        ori_id: str,
        values: RankedValues,
        crossroads: Crossroads,
        *,
        bond: Bond | None,
        counsel: Counsel | None,
        now_tick: int,
    ) -> CrossroadsResolution:
        result = resolve_crossroads(
            ori_id, values, crossroads, bond=bond, counsel=counsel, now_tick=now_tick, config=self.config
        )
        await self._record(ori_id, result.events)
        return result

    async def seed_relationship(self, seed: RelationshipSeed) -> CatalystResult:
        return await seed_relationship(seed, self._policy, self._appender)
