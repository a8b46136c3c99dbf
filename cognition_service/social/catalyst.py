"""The catalyst path: seeding relationships between Ori, with minor protection called inside it.

A seed writes one event on each Ori's stream; the pair is all-or-nothing to the caller: a request
the biography would refuse is refused whole before the first write, and a second write that fails
answers its status with "retry: idempotent" (re-sending completes the pair, nothing twice).

The policy service's CheckMinorProtection is asked on every seed, so a relationship can never be
seeded around it; on top, a hard floor blocks romantic edges for any minor-coded Ori even if the
policy answer were wrong, and any policy failure blocks (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass

from cognition_service.errors import DeadlineSpent, PartlyRecorded, PeerFailed
from cognition_service.social.events import event_draft
from cognition_service.social.ports import EventAppender, MinorProtectionClient
from egbe.v1 import biography_pb2, common_pb2, policy_pb2

ROMANTIC_TAGS = frozenset({"romantic", "sexual", "courtship"})


@dataclass(frozen=True)
class RelationshipSeed:
    ori: common_pb2.OriRef
    ori_is_minor: bool
    counterpart: common_pb2.OriRef
    counterpart_is_minor: bool
    edge_kind: str
    tags: frozenset[str]
    world_tick: int


@dataclass(frozen=True)
class Protection:
    allowed: bool
    reason: str


@dataclass(frozen=True)
class CatalystResult:
    seeded: bool
    reason: str
    events: tuple[biography_pb2.NewOriEvent, ...]


async def check_minor_protection(
    client: MinorProtectionClient,
    *,
    ori: common_pb2.OriRef,
    ori_is_minor: bool,
    surface: policy_pb2.ProtectionSurface.ValueType,
    tags: frozenset[str],
    counterpart_is_minor: bool = False,
) -> Protection:
    """Ask the policy service; an error or a refusal blocks, and the romantic-minor floor always holds
    (a spent deadline is raised: it is the caller's, not the policy's)."""
    try:
        answer = await client.check_minor_protection(
            policy_pb2.CheckMinorProtectionRequest(
                ori=ori,
                ori_is_minor=ori_is_minor,
                surface=surface,
                tags=sorted(tags),
                counterpart_is_minor=counterpart_is_minor,
            )
        )
    except DeadlineSpent:
        # Not a policy failure: the caller stopped waiting, and hears DEADLINE_EXCEEDED.
        raise
    except Exception as exc:  # fail closed: whatever went wrong, nothing is seeded
        return Protection(False, f"policy-unavailable:{type(exc).__name__}")
    if not answer.allowed:
        failed = [c.check for c in answer.checks if not c.passed]
        return Protection(False, f"policy:{failed[0] if failed else 'refused'}")
    minor_involved = ori_is_minor or counterpart_is_minor
    edge = surface == policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE
    if minor_involved and edge and tags & ROMANTIC_TAGS:
        return Protection(False, "minor-floor:romantic-edge")
    return Protection(True, "allowed")


async def seed_relationship(
    seed: RelationshipSeed, protection: MinorProtectionClient, appender: EventAppender
) -> CatalystResult:
    """Seed an edge on both Ori's streams, only after minor protection allows it from each side."""
    verdicts = [
        await check_minor_protection(
            protection,
            ori=who,
            ori_is_minor=who_minor,
            surface=policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE,
            tags=seed.tags,
            counterpart_is_minor=other_minor,
        )
        for who, who_minor, other_minor in (
            (seed.ori, seed.ori_is_minor, seed.counterpart_is_minor),
            (seed.counterpart, seed.counterpart_is_minor, seed.ori_is_minor),
        )
    ]
    blocked = next((v for v in verdicts if not v.allowed), None)
    if blocked is not None:
        return CatalystResult(False, blocked.reason, ())
    events = [
        event_draft(
            me.ori_id,
            biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED,
            {
                "other_ori_id": other.ori_id,
                "summary": f"{seed.edge_kind} seeded by the catalyst",
                "edge_kind": seed.edge_kind,
                "tags": sorted(seed.tags),
            },
            seed.world_tick,
            provenance_ref="cognition:catalyst",
        )
        for me, other in ((seed.ori, seed.counterpart), (seed.counterpart, seed.ori))
    ]
    # The request was checked whole against the biography's limits, so neither stream refuses it; a
    # second write that still fails (an outage, a conflict) leaves the first recorded, and a retry of
    # the same request completes the pair: the ids are deterministic, the first write repeats as a no-op.
    await appender.append(seed.ori.ori_id, [events[0]])
    try:
        await appender.append(seed.counterpart.ori_id, [events[1]])
    except PeerFailed as failed:
        raise PartlyRecorded(failed, seed.ori.ori_id, seed.counterpart.ori_id) from failed
    return CatalystResult(True, "seeded", tuple(events))
