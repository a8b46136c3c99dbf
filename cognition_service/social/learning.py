"""Learning by example: a steward's demonstrated behaviour re-weights the Ori's values, never its autonomy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cognition_service.social.config import SocialConfig
from cognition_service.social.events import event_draft
from cognition_service.social.values import Domain, RankedValues, clamp_priority
from egbe.v1 import biography_pb2

# Social priorities are 0..100; the biography stores value weights in basis points.
BP_PER_PRIORITY = 100


@dataclass(frozen=True)
class Demonstration:
    """What the steward did, and how it expressed each value (-100 against .. +100 for)."""

    steward_id: str
    behaviour: str
    value_signals: Mapping[Domain, int]


@dataclass(frozen=True)
class Learning:
    values: RankedValues
    shifts: Mapping[Domain, int]
    # One VALUE_SHIFT per re-weighted domain (the biography's value projection is per domain).
    value_shifts: tuple[biography_pb2.NewOriEvent, ...]
    behaviour_adjustment: biography_pb2.NewOriEvent


def learn_from_demonstration(
    ori_id: str, values: RankedValues, demonstration: Demonstration, config: SocialConfig, tick: int
) -> Learning:
    """Move each signalled priority by rate × signal (clamped 0..100) and re-rank; autonomy is kept.

    Mentorship shapes an Ori rather than overwriting it: the autonomy value is never re-weighted by
    example, in either direction.
    """
    updated = dict(values.priorities)
    shifts: dict[Domain, int] = {}
    for domain, signal in demonstration.value_signals.items():
        if domain == Domain.AUTONOMY:
            continue
        before = values.priority(domain)
        after = clamp_priority(before + max(-100, min(100, signal)) * config.learning_rate_pct // 100)
        if after != before:
            updated[domain] = after
            shifts[domain] = after - before
    learned = RankedValues.of(updated)
    strongest_shift = max(shifts, key=lambda d: (abs(shifts[d]), d.value), default=None)
    adjustment = (
        f"{'lean into' if shifts[strongest_shift] > 0 else 'ease off'} {strongest_shift.value}"
        if strongest_shift
        else "no change"
    )
    common = {"steward_id": demonstration.steward_id, "behaviour": demonstration.behaviour}
    autonomy_preserved = learned.priority(Domain.AUTONOMY) == values.priority(Domain.AUTONOMY)
    return Learning(
        values=learned,
        shifts=shifts,
        value_shifts=tuple(
            event_draft(
                ori_id,
                biography_pb2.ORI_EVENT_KIND_VALUE_SHIFT,
                {
                    **common,
                    "value_ref": domain.value,
                    "weight_bp": learned.priority(domain) * BP_PER_PRIORITY,
                    "shift": shift,
                    "after": learned.as_payload(),
                    "autonomy_preserved": autonomy_preserved,
                },
                tick,
            )
            for domain, shift in sorted(shifts.items())
        ),
        behaviour_adjustment=event_draft(
            ori_id,
            biography_pb2.ORI_EVENT_KIND_PERSONALITY_EVENT,
            {
                **common,
                "summary": f"{adjustment} (shown by {demonstration.steward_id}: {demonstration.behaviour})",
                "adjustment": adjustment,
                "ranking": [d.value for d in learned.ranking],
            },
            tick,
        ),
    )
