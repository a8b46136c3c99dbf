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
from world.artifact import DirectiveRecord
from world.clients import ServiceClients
from world.framing import write_frame
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


class WorldRunError(RuntimeError):
    """The services refused or failed the run; the message says which call and why."""


def describe_rpc_error(what: str, exc: grpc.aio.AioRpcError) -> str:
    return f"{what} failed: {exc.code().name}: {exc.details()}"


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


async def apply_operator_action(clients: ServiceClients, action: OperatorAction) -> tuple[bool, str]:
    """Throws an operator kill switch through the gateway's OperatorService: (applied, control id or why not).

    A refused switch does not stop the world: the run records it and the report says it was not thrown.
    """
    try:
        if action.kind is OperatorActionKind.KILL_ORI:
            ori_reply = await clients.operator.KillOri(
                gateway_pb2.KillOriRequest(ori_id=action.target, reason=action.reason),
                metadata=clients.operator_md,
            )
            return True, str(ori_reply.control.control_id)
        tier = common_pb2.CognitionTier.Value(f"COGNITION_TIER_{action.target.upper()}")
        tier_reply = await clients.operator.KillTier(
            gateway_pb2.KillTierRequest(tier=tier, reason=action.reason), metadata=clients.operator_md
        )
        return True, str(tier_reply.control.control_id)
    except grpc.aio.AioRpcError as exc:
        return False, describe_rpc_error(f"operator {action.kind.value} {action.target}", exc)


async def current_spend(clients: ServiceClients, world_id: str, tenant_id: str) -> tuple[int, int] | None:
    """(consumed tokens, world cap) from the gateway's ledger; None when the gateway cannot say."""
    try:
        spend = await clients.operator.GetSpend(
            gateway_pb2.GetSpendRequest(world_id=world_id, tenant_id=tenant_id), metadata=clients.world_md
        )
    except grpc.aio.AioRpcError:
        return None
    return int(spend.consumed_tokens), int(spend.world_cap_tokens)


@dataclass
class LoopHooks:
    """Optional outputs of a loop: world snapshots, the result log, wall-clock pacing."""

    realtime: bool = False
    on_snapshot: Callable[[int, WorldState], None] | None = None
    result_log: BinaryIO | None = None


class WorldLoop:
    """One pass over ticks state.tick .. end_tick-1, lock-step with the kernel."""

    def __init__(
        self, clients: ServiceClients, setup: WorldSetup, progress: ProgressBar, hooks: LoopHooks
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
        self.spent, self.cap, self.calls, self.tokens = 0, 0, 0, 0

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
                applied, detail = await apply_operator_action(self.clients, action)
                by_ori = action.kind is OperatorActionKind.KILL_ORI
                row = self.setup.population.index_of(action.target) if by_ori else -1
                tier = (
                    0 if by_ori else common_pb2.CognitionTier.Value(f"COGNITION_TIER_{action.target.upper()}")
                )
                self.recording.kills.append(KillEffect(action, applied, detail, row, tier))

    def _record(self, tick: int, result: action_pb2.TickResult, results: list[CognitionResult]) -> None:
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
        for c in result.candidates:
            sums = recording.issued.setdefault((c.tier, c.cause), [0, 0, 0])
            sums[0] += 1
            sums[1] += c.token_estimate
            sums[2] += c.cost_estimate_micro_usd
            for kill in recording.kills:
                if kill.row == c.slot or (kill.row < 0 and kill.tier == c.tier):
                    kill.calls_issued_after += 1
        for merged in results:
            recording.run_ticks.setdefault(merged.payload.fields["run_id"].string_value, tick)
        self.calls += report.calls_issued
        self.tokens += report.estimated_tokens

    async def _after_step(
        self, state: WorldState, first_tick: int, end_tick: int, result: action_pb2.TickResult
    ) -> None:
        scenario = self.setup.scenario
        if state.tick % scenario.snapshot_every_ticks == 0 and self.hooks.on_snapshot is not None:
            self.hooks.on_snapshot(state.tick, state)
        if (state.tick - first_tick) % SPEND_POLL_TICKS == 0 or state.tick == end_tick:
            polled = await current_spend(self.clients, self.setup.world_id, scenario.tenant_id)
            if polled is not None:
                self.spent, self.cap = polled
        report = result.report
        tiers = (report.clotho_count, report.lachesis_count, report.atropos_count)
        self.progress.update(Progress(state.tick, tiers, self.calls, self.tokens, self.spent, self.cap))

    async def run(self, state: WorldState, end_tick: int) -> LoopRecording:
        setup = self.setup
        previous: Perception | None = None
        started = time.monotonic()
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
                self._record(tick, result, results)
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
