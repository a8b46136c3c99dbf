"""The shared append decision, in particular several appends decided as one group commit."""

from __future__ import annotations

from biography_service.appending import AppendRequest, plan_group
from biography_service.errors import EventIdConflict, WrongExpectedVersion
from biography_service.events import ANY, NO_STREAM, AppendResult, exact
from tests.biography.events_for_tests import memories


def test_each_request_in_a_group_sees_the_ones_before_it() -> None:
    first, second, conflicting = memories(2), memories(1), memories(1)
    plan = plan_group(
        [
            AppendRequest("ori-a", NO_STREAM, first),
            AppendRequest("ori-a", exact(1), second),
            AppendRequest("ori-a", exact(1), conflicting),  # stale: version 2 now exists
            AppendRequest("ori-a", ANY, first),  # a repeat of the first request
            AppendRequest("ori-b", ANY, [*memories(1), first[0]]),  # partly recorded
        ],
        heads={},
        recorded={},
        last_global_position=10,
        recorded_at_us=1,
    )
    a, b, c, d, e = plan.outcomes
    assert isinstance(a, AppendResult)
    assert (a.last_version, a.first_global_position, a.last_global_position) == (1, 11, 12)
    assert isinstance(b, AppendResult)
    assert (b.last_version, b.first_global_position) == (2, 13)
    assert isinstance(c, WrongExpectedVersion)
    assert c.actual == 2
    assert isinstance(d, AppendResult)
    assert d.already_recorded
    assert isinstance(e, EventIdConflict)
    assert [ori for ori, _ in plan.writes] == ["ori-a", "ori-a"]
    assert plan.last_global_position == 13
    # The chain runs across the requests of the group.
    assert plan.writes[1][1].events[0].previous_hash == plan.writes[0][1].events[-1].hash
