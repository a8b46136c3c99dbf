"""Implementations of the social layer's ports for tests, and seed builders."""

from __future__ import annotations

from collections.abc import Sequence

from cognition_service.social.catalyst import RelationshipSeed
from egbe.v1 import biography_pb2, common_pb2, policy_pb2
from policy_service.config import PolicyConfig
from policy_service.servicer import PolicyServicer


class ScriptedPolicy:
    """Answers CheckMinorProtection as scripted ("allow", "deny" or "fail"), recording each request.

    Stands in for the policy service's evaluator only to drive the catalyst down every path,
    including a policy that wrongly allows; the real client adapter is exercised over a socket below.
    """

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.requests: list[policy_pb2.CheckMinorProtectionRequest] = []

    async def check_minor_protection(
        self, request: policy_pb2.CheckMinorProtectionRequest
    ) -> policy_pb2.CheckMinorProtectionResponse:
        self.requests.append(request)
        if self.behaviour == "fail":
            raise ConnectionError("policy service down")
        allowed = self.behaviour == "allow"
        return policy_pb2.CheckMinorProtectionResponse(
            allowed=allowed, checks=[policy_pb2.PolicyCheck(check="minor-protection", passed=allowed)]
        )

    async def classify_steward_text(
        self, request: policy_pb2.ClassifyStewardTextRequest
    ) -> policy_pb2.ClassifyStewardTextResponse:
        """The policy service's own servicer answers: its coercion policy, not a script."""
        return await PolicyServicer(PolicyConfig()).ClassifyStewardText(request, None)  # type: ignore[arg-type]


class RecordingAppender:
    def __init__(self) -> None:
        self.appended: list[tuple[str, biography_pb2.NewOriEvent]] = []

    async def append(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        self.appended.extend((ori_id, e) for e in events)


def ref(ori_id: str) -> common_pb2.OriRef:
    return common_pb2.OriRef(tenant_id="t", world_id="w", ori_id=ori_id)


def seed(tags: frozenset[str], a_minor: bool, b_minor: bool) -> RelationshipSeed:
    return RelationshipSeed(ref("a"), a_minor, ref("b"), b_minor, "bond", tags, world_tick=9)
