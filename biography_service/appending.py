"""The append decision both backends share: expected-version check, idempotent repeats, chaining."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from biography_service.chain import GENESIS_HASH, StreamLinker
from biography_service.errors import BiographyError, EventIdConflict, WrongExpectedVersion
from biography_service.events import AppendResult, ExpectedVersion, NewEvent, RecordedEvent
from biography_service.projections import ProjectionOp, projection_ops


@dataclass(frozen=True)
class StreamHead:
    """A stream's last version (None = no stream) and the hash the next event chains from."""

    version: int | None
    hash: str = GENESIS_HASH


@dataclass(frozen=True)
class AppendPlan:
    """The rows and projection changes one append writes, and what it answers."""

    events: list[RecordedEvent]
    payload_json: list[str]
    projection_ops: list[ProjectionOp]
    result: AppendResult


def plan_append(
    ori_id: str,
    expected: ExpectedVersion,
    proposed: Sequence[NewEvent],
    *,
    head: StreamHead,
    already: Sequence[RecordedEvent],
    next_global_position: int,
    recorded_at_us: int,
) -> AppendPlan | AppendResult:
    """Decide an append under the store's write lock.

    `already` holds the recorded events whose ids appear in `proposed`. Returns the plan to write, or
    the earlier result when the call repeats an append that was recorded (nothing to write). Raises
    WrongExpectedVersion or EventIdConflict; in every case the caller writes nothing else.
    """
    if already:
        return _repeat_result(ori_id, expected, proposed, already)
    if not expected.admits(head.version):
        raise WrongExpectedVersion(ori_id, expected.describe(), head.version)
    version = -1 if head.version is None else head.version
    linker = StreamLinker(ori_id, head.hash, recorded_at_us)
    link = linker.link
    events: list[RecordedEvent] = []
    payloads: list[str] = []
    ops: list[ProjectionOp] = []
    global_position = next_global_position - 1
    for stream_version, new in enumerate(proposed, start=version + 1):
        global_position += 1
        previous = linker.previous_hash
        event = RecordedEvent(
            new.event_id,
            ori_id,
            stream_version,
            global_position,
            new.kind,
            new.payload,
            new.world_tick,
            recorded_at_us,
            new.provenance_ref,
            previous,
            link(new, stream_version, global_position),
        )
        events.append(event)
        payloads.append(new.payload_json)
        ops += projection_ops(event)
    result = AppendResult(
        last_version=events[-1].stream_version,
        first_global_position=events[0].global_position,
        last_global_position=events[-1].global_position,
        already_recorded=False,
    )
    return AppendPlan(events, payloads, ops, result)


def _repeat_result(
    ori_id: str,
    expected: ExpectedVersion,
    proposed: Sequence[NewEvent],
    already: Sequence[RecordedEvent],
) -> AppendResult:
    by_id = {event.event_id: event for event in already}
    recorded = [by_id.get(new.event_id) for new in proposed]
    for new, event in zip(proposed, recorded, strict=True):
        if event is None:
            raise EventIdConflict(
                already[0].event_id, "already recorded; a repeat must re-send exactly the recorded batch"
            )
        if event.ori_id != ori_id:
            raise EventIdConflict(event.event_id, f"already recorded in another stream ({event.ori_id!r})")
        if not event.same_content(new):
            raise EventIdConflict(event.event_id, "already recorded with different content")
    placed = [event for event in recorded if event is not None]
    first = placed[0].stream_version
    if [event.stream_version for event in placed] != list(range(first, first + len(placed))):
        raise EventIdConflict(placed[0].event_id, "already recorded, but not as one contiguous batch")
    if not expected.admits(first - 1 if first > 0 else None):
        # The same events sit where this expectation could not have placed them. Not ABORTED: retrying
        # under the actual version would meet the same recorded events again, for ever.
        raise EventIdConflict(
            placed[0].event_id,
            f"already recorded at version {first}, where expected {expected.describe()} does not place it",
        )
    return AppendResult(
        last_version=placed[-1].stream_version,
        first_global_position=placed[0].global_position,
        last_global_position=placed[-1].global_position,
        already_recorded=True,
    )


@dataclass(frozen=True)
class AppendRequest:
    ori_id: str
    expected: ExpectedVersion
    events: Sequence[NewEvent]


@dataclass(frozen=True)
class GroupPlan:
    """Several appends decided together (group commit): one outcome per request, the writes in order."""

    outcomes: list[AppendResult | BiographyError]
    writes: list[tuple[str, AppendPlan]]
    last_global_position: int


def plan_group(
    requests: Sequence[AppendRequest],
    *,
    heads: dict[str, StreamHead],
    recorded: dict[str, RecordedEvent],
    last_global_position: int,
    recorded_at_us: int,
) -> GroupPlan:
    """Decide each request in order as if each had committed alone, seeing the ones before it.

    `heads` holds the stored head of every stream in the group and `recorded` every stored event
    whose id appears in the group. A refused request is that request's outcome; the rest go on.
    """
    heads = dict(heads)
    recorded = dict(recorded)
    position = last_global_position
    outcomes: list[AppendResult | BiographyError] = []
    writes: list[tuple[str, AppendPlan]] = []
    for request in requests:
        already = [recorded[e.event_id] for e in request.events if e.event_id in recorded]
        try:
            plan = plan_append(
                request.ori_id,
                request.expected,
                request.events,
                head=heads.get(request.ori_id, StreamHead(None)),
                already=already,
                next_global_position=position + 1,
                recorded_at_us=recorded_at_us,
            )
        except BiographyError as error:
            outcomes.append(error)
            continue
        if isinstance(plan, AppendPlan):
            writes.append((request.ori_id, plan))
            position = plan.result.last_global_position
            heads[request.ori_id] = StreamHead(plan.events[-1].stream_version, plan.events[-1].hash)
            recorded.update((event.event_id, event) for event in plan.events)
            outcomes.append(plan.result)
        else:
            outcomes.append(plan)
    return GroupPlan(outcomes, writes, position)
