"""`SocialLayer`: the cognition service's entry point; decides, then appends every state change as events."""

from __future__ import annotations

from collections.abc import Sequence

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
from cognition_service.social.ports import EventAppender, MinorProtectionClient
from cognition_service.social.values import RankedValues
from egbe.v1 import biography_pb2


class SocialLayer:
    """Pure decisions from the sibling modules, written to the biography through the injected appender."""

    def __init__(
        self, appender: EventAppender, protection: MinorProtectionClient, config: SocialConfig | None = None
    ) -> None:
        self.config = config or SocialConfig()
        self._appender = appender
        self._protection = protection

    async def _record(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        if events:
            await self._appender.append(ori_id, events)

    async def assign_objective(self, ori: OriContext, objective: Objective, tick: int) -> Assignment:
        result = assign_objective(ori, objective, self.config, tick)
        await self._record(ori.ori_id, result.events)
        return result

    async def learn_from_demonstration(
        self, ori_id: str, values: RankedValues, demonstration: Demonstration, tick: int
    ) -> Learning:
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
        return await seed_relationship(seed, self._protection, self._appender)
