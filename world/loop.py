"""The world loop: script events, perception out over StreamTicks, actions back, the world steps on.

Lock-step at 20 Hz of game time: tick t's actions decide how the world moves before tick t+1 is
perceived. Accelerated as fast as the kernel answers, or paced to the wall clock with `realtime`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import grpc
import numpy as np
import numpy.typing as npt

from egbe.v1 import action_pb2, common_pb2, gateway_pb2, kernel_pb2, perception_pb2
from world.actions import decode_actions
from world.artifact import TIER_NAME, DirectiveRecord, SpendPoll
from world.clients import ServiceClients
from world.controls import IssuedCall
from world.errors import WorldRunError, describe_rpc_error
from world.framing import write_frame
from world.ledger import LedgerView, run_share
from world.perception import Perception, build_perception, to_columns, to_rows
from world.population import Population
from world.progress import Progress, ProgressBar
from world.scenario import TICK_HZ, Encoding, OperatorAction, OperatorActionKind, Scenario, StewardDirective
from world.script import ScriptIndex
from world.simulation import WorldState, WorldStepper
from world.story import CognitionResult, StoryRecorder, cognition_results

SPEND_POLL_TICKS = 200
TIER_COUNT = 4  # unspecified, clotho, lachesis, atropos: indexes of CognitionTier


StreamTicksCall = grpc.aio.StreamStreamCall[kernel_pb2.StreamTicksRequest, kernel_pb2.StreamTicksResponse]


@dataclass
class KillEffect:
    action: OperatorAction
    applied: bool
    detail: str
    row: int  # -1 for a tier kill
    tier: int  # the killed tier for a tier kill, else 0
    ticks_acting_after: int = 0
    calls_issued_after: int = 0


@dataclass
class LoopRecording:
    """What the loop saw, tick by tick; the artifact is built from this."""

    world_id: str
    ticks: list[int] = field(default_factory=list)
    clotho: list[int] = field(default_factory=list)
    lachesis: list[int] = field(default_factory=list)
    atropos: list[int] = field(default_factory=list)
    calls_issued: list[int] = field(default_factory=list)
    estimated_tokens: list[int] = field(default_factory=list)
    # (tier, cause) -> [calls, token estimate, cost estimate]
    issued: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    # gateway run id -> the tick its result was merged into the world's actions
    run_ticks: dict[str, int] = field(default_factory=dict)
    # every call the kernel issued, with the wall time its tick was sent (to match controls in force)
    issued_calls: list[IssuedCall] = field(default_factory=list)
    # gateway run id -> cognition's fallback reason, for results that reached the world as a fallback
    fallbacks: dict[str, str] = field(default_factory=dict)
    spend: list[SpendPoll] = field(default_factory=list)  # the ledger's charge for the run, polled
    directives: list[DirectiveRecord] = field(default_factory=list)
    kills: list[KillEffect] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)
    merged_results: int = 0
    tier_ticks: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, TIER_COUNT), np.int64))
    snapshots: list[tuple[int, WorldState]] = field(default_factory=list)


@dataclass
class WorldSetup:
    scenario: Scenario
    population: Population
    seed: int
    world_id: str
    script: ScriptIndex
    stepper: WorldStepper


def perception_batch(
    setup: WorldSetup, perception: Perception, previous: Perception | None, slots: npt.NDArray[np.uint32]
) -> perception_pb2.PerceptionBatch:
    batch = perception_pb2.PerceptionBatch(
        world_id=setup.world_id, tick=perception.tick, situations=perception.situations
    )
    encoding = setup.scenario.encoding
    if encoding is Encoding.ROWS:
        batch.frames.extend(to_rows(perception, slots))
    else:
        basis = previous if encoding is Encoding.DELTA else None
        batch.columns.CopyFrom(to_columns(perception, basis))
    return batch


async def apply_directive(
    clients: ServiceClients, world_id: str, directive: StewardDirective
) -> DirectiveRecord:
    """Offers a steward directive to the kernel's steward-not-owner filter and records the answer."""
    kind = kernel_pb2.StewardDirectiveKind.Value(f"STEWARD_DIRECTIVE_KIND_{directive.kind.name}")
    request = kernel_pb2.ApplyStewardDirectiveRequest(
        world_id=world_id,
        ori_id=directive.ori,
        directive=kernel_pb2.StewardDirective(steward_id=directive.steward, kind=kind, text=directive.text),
    )
    try:
        answer = await clients.kernel.ApplyStewardDirective(request, metadata=clients.world_md)
    except grpc.aio.AioRpcError as exc:
        raise WorldRunError(describe_rpc_error("ApplyStewardDirective", exc)) from exc
    classified = kernel_pb2.StewardDirectiveKind.Name(answer.classified_kind)
    return DirectiveRecord(
        at_tick=directive.at_tick,
        ori_id=directive.ori,
        steward=directive.steward,
        kind=directive.kind.value,
        text=directive.text,
        allowed=answer.allowed,
        classified_kind=classified.removeprefix("STEWARD_DIRECTIVE_KIND_").lower(),
        reclassified=answer.reclassified,
        policy_ref=answer.policy_ref,
        answer=action_pb2.ActionKind.Name(answer.action.kind).removeprefix("ACTION_KIND_").lower(),
    )


async def apply_operator_action(
    clients: ServiceClients, world_id: str, action: OperatorAction
) -> tuple[bool, str]:
    """Throws an operator kill switch, scoped to this world, through the gateway's OperatorService:
    (applied, control id or why not).

    A refused switch does not stop the world: the run records it and the report says it was not thrown.
    """
    try:
        if action.kind is OperatorActionKind.KILL_ORI:
            ori_reply = await clients.operator.KillOri(
                gateway_pb2.KillOriRequest(ori_id=action.target, reason=action.reason, world_id=world_id),
                metadata=clients.operator_md,
            )
            return True, str(ori_reply.control.control_id)
        tier = common_pb2.CognitionTier.Value(f"COGNITION_TIER_{action.target.upper()}")
        tier_reply = await clients.operator.KillTier(
            gateway_pb2.KillTierRequest(tier=tier, reason=action.reason, world_id=world_id),
            metadata=clients.operator_md,
        )
        return True, str(tier_reply.control.control_id)
    except grpc.aio.AioRpcError as exc:
        return False, describe_rpc_error(f"operator {action.kind.value} {action.target}", exc)


async def lift_run_controls(clients: ServiceClients, world_id: str, kills: list[KillEffect]) -> None:
    """Lifts the world-scoped kill switches the run threw, so the next run of this world starts free of
    them; one already lifted or expired is left as it is."""
    for kill in kills:
        if not kill.applied:
            continue
        by_ori = kill.action.kind is OperatorActionKind.KILL_ORI
        scope = gateway_pb2.CONTROL_SCOPE_ORI if by_ori else gateway_pb2.CONTROL_SCOPE_TIER
        request = gateway_pb2.ResumeRequest(
            scope=scope, target=kill.action.target, reason="the run that threw it ended", world_id=world_id
        )
        try:
            await clients.operator.Resume(request, metadata=clients.operator_md)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise WorldRunError(describe_rpc_error(f"Resume {kill.action.target}", exc)) from exc


@dataclass
class LoopHooks:
    """Optional outputs of a loop: world snapshots, the result log, wall-clock pacing."""

    realtime: bool = False
    on_snapshot: Callable[[int, WorldState], None] | None = None
    result_log: BinaryIO | None = None


class WorldLoop:
    """One pass over ticks state.tick .. end_tick-1, lock-step with the kernel."""

    def __init__(
        self,
        clients: ServiceClients,
        setup: WorldSetup,
        progress: ProgressBar,
        hooks: LoopHooks,
        ledger_start: LedgerView,
    ) -> None:
        self.clients = clients
        self.setup = setup
        self.progress = progress
        self.hooks = hooks
        size = setup.population.size
        self.recording = LoopRecording(world_id=setup.world_id)
        self.story = StoryRecorder(setup.population, setup.script)  # lines sent, replies and decisions
        self.recording.tier_ticks = np.zeros((size, TIER_COUNT), dtype=np.int64)
        self.slots = np.arange(size, dtype=np.uint32)
        self.kinds = np.zeros(size, dtype=np.uint8)
        self.tiers = np.zeros(size, dtype=np.uint8)
        self.ledger_start = ledger_start
        self.calls = 0
        self.charged: int | None = None  # unknown until the ledger first answers
        self.started = time.monotonic()

    async def _script(self, tick: int, first_tick: int) -> None:
        """The steward's directives and the operator's kill switches due on this tick.

        A fork starts with fresh services: kill switches thrown before its first tick are thrown again.
        """
        script = self.setup.scenario.player
        for directive in script.steward_directives:
            if directive.at_tick == tick:
                self.recording.directives.append(
                    await apply_directive(self.clients, self.setup.world_id, directive)
                )
        for action in script.operator_actions:
            if action.at_tick == tick or (tick == first_tick and action.at_tick < tick):
                applied, detail = await apply_operator_action(self.clients, self.setup.world_id, action)
                by_ori = action.kind is OperatorActionKind.KILL_ORI
                row = self.setup.population.index_of(action.target) if by_ori else -1
                tier = (
                    0 if by_ori else common_pb2.CognitionTier.Value(f"COGNITION_TIER_{action.target.upper()}")
                )
                self.recording.kills.append(KillEffect(action, applied, detail, row, tier))

    def _record(
        self, tick: int, sent_unix_ms: int, result: action_pb2.TickResult, results: list[CognitionResult]
    ) -> None:
        recording, report = self.recording, result.report
        recording.ticks.append(tick)
        recording.clotho.append(report.clotho_count)
        recording.lachesis.append(report.lachesis_count)
        recording.atropos.append(report.atropos_count)
        recording.calls_issued.append(report.calls_issued)
        recording.estimated_tokens.append(report.estimated_tokens)
        recording.merged_results += report.cognition_results_merged
        if report.config_fingerprint.fnv1a64:
            recording.fingerprints[report.config_fingerprint.scope] = report.config_fingerprint.fnv1a64
        rows = np.arange(len(self.tiers))
        recording.tier_ticks[rows, np.minimum(self.tiers, TIER_COUNT - 1)] += 1
        for kill in recording.kills:
            if kill.row >= 0 and self.kinds[kill.row] != action_pb2.ACTION_KIND_UNSPECIFIED:
                kill.ticks_acting_after += 1
        ids = self.setup.population.ids
        for c in result.candidates:
            recording.issued_calls.append(
                IssuedCall(tick, ids[c.slot], TIER_NAME.get(c.tier, "unspecified"), sent_unix_ms)
            )
            sums = recording.issued.setdefault((c.tier, c.cause), [0, 0, 0])
            sums[0] += 1
            sums[1] += c.token_estimate
            sums[2] += c.cost_estimate_micro_usd
            for kill in recording.kills:
                if kill.row == c.slot or (kill.row < 0 and kill.tier == c.tier):
                    kill.calls_issued_after += 1
        for merged in results:
            run_id = merged.payload.fields["run_id"].string_value
            recording.run_ticks.setdefault(run_id, tick)
            if "fallback" in merged.payload.fields:
                recording.fallbacks.setdefault(run_id, merged.payload.fields["fallback"].string_value)
        self.calls += report.calls_issued

    async def poll_spend(self, ticks_run: int) -> None:
        """Reads what the ledger has charged this run so far; a reading that fails is skipped."""
        world, tenant = self.setup.world_id, self.setup.scenario.tenant_id
        try:
            share = await run_share(self.clients, world, tenant, self.ledger_start)
        except WorldRunError:
            return
        self.charged = share.consumed_tokens
        self.recording.spend.append(
            SpendPoll(
                tick=ticks_run,
                elapsed_seconds=round(time.monotonic() - self.started, 3),
                tokens_charged=share.consumed_tokens,
                micro_usd_charged=share.consumed_micro_usd,
                world_cap_tokens=share.world_cap_tokens,
            )
        )

    async def _after_step(
        self, state: WorldState, first_tick: int, end_tick: int, result: action_pb2.TickResult
    ) -> None:
        scenario = self.setup.scenario
        if state.tick % scenario.snapshot_every_ticks == 0 and self.hooks.on_snapshot is not None:
            self.hooks.on_snapshot(state.tick, state)
        ticks_run = state.tick - first_tick
        if (ticks_run - 1) % SPEND_POLL_TICKS == 0 or state.tick == end_tick:  # from the first tick on
            await self.poll_spend(ticks_run)
        report = result.report
        tiers = (report.clotho_count, report.lachesis_count, report.atropos_count)
        cap = self.recording.spend[-1].world_cap_tokens if self.recording.spend else None
        self.progress.update(Progress(state.tick, tiers, self.calls, self.charged, cap))

    async def run(self, state: WorldState, end_tick: int) -> LoopRecording:
        setup = self.setup
        previous: Perception | None = None
        self.started = started = time.monotonic()
        self.recording.spend.append(
            SpendPoll(
                tick=0,
                elapsed_seconds=0.0,
                tokens_charged=0,
                micro_usd_charged=0,
                world_cap_tokens=self.ledger_start.world_cap_tokens,
            )
        )
        first_tick = state.tick
        story = self.story
        stream: StreamTicksCall = self.clients.kernel.StreamTicks(  # type: ignore[call-arg]
            metadata=self.clients.world_md
        )
        try:
            while state.tick < end_tick:
                tick = state.tick
                await self._script(tick, first_tick)
                perception = build_perception(setup.scenario, setup.population, setup.script, state)
                request = kernel_pb2.StreamTicksRequest(
                    batch=perception_batch(setup, perception, previous, self.slots)
                )
                story.sent(tick, time.monotonic())
                sent_unix_ms = time.time_ns() // 1_000_000
                await stream.write(request)
                reply = await stream.read()
                received_at = time.monotonic()
                if not isinstance(reply, kernel_pb2.StreamTicksResponse):  # grpc.aio.EOF
                    raise WorldRunError(f"the kernel closed the tick stream at tick {tick}")
                result = reply.result
                if self.hooks.result_log is not None:
                    write_frame(self.hooks.result_log, result, compress=True)
                decode_actions(result.actions, self.kinds, self.tiers)
                results = cognition_results(result.actions)
                story.received(tick, results, received_at)
                self._record(tick, sent_unix_ms, result, results)
                previous = perception
                setup.stepper.apply_actions(state, self.kinds)
                setup.stepper.advance(state)
                await self._after_step(state, first_tick, end_tick, result)
                if self.hooks.realtime:
                    behind = started + (state.tick - first_tick) / TICK_HZ - time.monotonic()
                    if behind > 0:
                        await asyncio.sleep(behind)
            await stream.done_writing()
        except grpc.aio.AioRpcError as exc:
            raise WorldRunError(describe_rpc_error(f"StreamTicks at tick {state.tick}", exc)) from exc
        finally:
            stream.cancel()
            self.progress.finish()
        return self.recording
