"""The Moirai kernel: registration, one deterministic tick over the agent arrays, and agent state."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from google.protobuf import struct_pb2
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.agent_state import (
    AGENT_BIT_COGNITION_DECIDED,
    AGENT_BIT_FRESH_DECISION,
    COUNT_CANDIDATES,
    COUNT_CHANGED,
    AgentArrays,
)
from kernel_service.behavior.profile import registration_violations
from kernel_service.behavior_seam import BehaviorLayer, Escalations
from kernel_service.bounds import MAX_ACTION_KIND, MAX_BP, MAX_PLAN_STEP, id_violation
from kernel_service.cognition_calls import CallTables
from kernel_service.config import KernelConfig
from kernel_service.core_numpy import CLOTHO, LACHESIS, CoreParams
from kernel_service.errors import UnknownAgent
from kernel_service.fragments import FragmentStore
from kernel_service.moment import Moments, capture_moments
from kernel_service.perception_codec import DecodedBatch, decode_batch
from kernel_service.row_codec import CRowCodec, PythonRowCodec, RowCodec
from kernel_service.situations import NO_SITUATIONS
from kernel_service.snapshot_checks import agent_violations, decode_arrays, registry_violations
from kernel_service.tick_core import TickCore
from kernel_service.tick_result import (
    GuardStamps,
    Registry,
    build_tick_result,
    guard_stamps,
    report_constants,
)
from services.errors import FieldViolation, InvalidArgument

# Bit t of a tick's `cognition_unavailable_tiers` is CognitionTier t (Clotho 1, Lachesis 2, Atropos 3).
ALL_TIER_BITS = (
    1 << common_pb2.COGNITION_TIER_CLOTHO
    | 1 << common_pb2.COGNITION_TIER_LACHESIS
    | 1 << common_pb2.COGNITION_TIER_ATROPOS
)


NO_ESCALATIONS = Escalations(np.empty(0, np.uint32), np.empty(0, np.uint8))


class Kernel:
    """One world's population and its tick. Not thread-safe: one tick at a time, by design."""

    def __init__(
        self,
        config: KernelConfig,
        core: TickCore,
        behavior: BehaviorLayer | None = None,
        world_id: str = "",
    ) -> None:
        self.config = config
        self.core = core
        self.behavior = behavior
        if behavior is not None:
            behavior.use_core(
                core.name, core.ranges
            )  # the behaviour step runs in the kernel's core (C or numpy)
        self.world_id = world_id
        self.fingerprint = config.fingerprint(behavior.fingerprint_inputs() if behavior is not None else None)
        self.core_params = CoreParams.from_config(config)
        self.call_tables = CallTables.from_config(config)
        self.report_constants = report_constants(config, core.name, self.fingerprint)
        self.row_codec: RowCodec = CRowCodec() if core.name == "c" else PythonRowCodec()
        self.arrays = AgentArrays()
        self.ori_ids: list[str] = []
        self.tenant_ids: list[str] = []
        self.display_names: list[str] = []  # by slot, from identities ("" = none); never in the core
        self.slot_by_ori: dict[str, int] = {}
        self.last_tick: int | None = None
        self.fragments = FragmentStore(config.max_pending_fragments)
        self._answer_marks = np.zeros(0, np.uint8)  # build_actions' scratch, a byte per slot
        # The last tick's calls (slot per candidate), situations and guard stamps, for its moments.
        self._last_calls: NDArray[np.uint32] = np.empty(0, np.uint32)
        self._last_situations = NO_SITUATIONS
        self._last_guards = GuardStamps(np.empty(0, np.uint32), np.empty(0, np.uint8))

    @property
    def registry(self) -> Registry:
        return Registry(self.world_id, self.ori_ids, self.tenant_ids)

    def check_registration(
        self, world_id: str, registrations: Sequence[kernel_pb2.AgentRegistration]
    ) -> dict[str, int]:
        """Everything `register` refuses, against the current state, changing nothing; returns the
        slot each new Ori would get."""
        if self.world_id and world_id and world_id != self.world_id:
            raise InvalidArgument.field("world_id", f"this kernel serves world {self.world_id!r}")
        ids = [
            violation
            for index, registration in enumerate(registrations)
            for violation in (
                id_violation(f"agents[{index}].ori.ori_id", registration.ori.ori_id, required=True),
                id_violation(f"agents[{index}].ori.tenant_id", registration.ori.tenant_id),
                id_violation(f"agents[{index}].ori.world_id", registration.ori.world_id),
            )
            if violation is not None
        ]
        world = id_violation("world_id", world_id)
        if world is not None or ids:
            raise InvalidArgument([world, *ids] if world is not None else ids)
        new: dict[str, int] = {}
        for index, registration in enumerate(registrations):
            ori = registration.ori
            if ori.world_id and (world_id or self.world_id) and ori.world_id != (world_id or self.world_id):
                raise InvalidArgument.field(f"agents[{index}].ori.world_id", "differs from world_id")
            if ori.ori_id not in self.slot_by_ori and ori.ori_id not in new:
                new[ori.ori_id] = len(self.ori_ids) + len(new)
        # Traits and values are checked before anything changes: the behaviour layer would refuse them.
        violations = registration_violations(registrations)
        if violations:
            raise InvalidArgument(violations)
        if len(self.ori_ids) + len(new) > self.config.max_batch_agents:
            raise InvalidArgument.field("agents", "registration exceeds max_batch_agents")
        return new

    def register(self, world_id: str, registrations: Sequence[kernel_pb2.AgentRegistration]) -> list[int]:
        """Give each new Ori the next dense slot; a known Ori keeps its slot. All or nothing.

        An identity's display name is kept beside the Ori's id (for logs; a later identity renames)."""
        new = self.check_registration(world_id, registrations)
        first_of: dict[str, kernel_pb2.AgentRegistration] = {}
        for registration in registrations:
            if registration.ori.ori_id in new:
                first_of.setdefault(registration.ori.ori_id, registration)
        if self.behavior is not None and first_of:
            # The layer validates the whole batch before applying any of it, so it goes first.
            self.behavior.register(len(self.ori_ids), list(first_of.values()))
        if world_id and not self.world_id and registrations:  # an empty registration claims no world
            self.world_id = world_id
        self.arrays.add(len(new))
        self._reserve()
        for ori_id, registration in first_of.items():
            self.ori_ids.append(ori_id)
            self.tenant_ids.append(registration.ori.tenant_id)
            self.display_names.append("")
        self.slot_by_ori.update(new)
        for registration in registrations:
            if registration.HasField("identity"):
                self.display_names[self.slot_by_ori[registration.ori.ori_id]] = (
                    registration.identity.display_name
                )
        return [self.slot_by_ori[r.ori.ori_id] for r in registrations]

    def decode(self, batch: perception_pb2.PerceptionBatch) -> DecodedBatch:
        """Validate a batch against the current state; raises InvalidArgument and changes nothing."""
        return decode_batch(
            batch,
            world_id=self.world_id,
            registered=self.arrays.count,
            last_tick=self.last_tick,
            max_agents=self.config.max_batch_agents,
            row_codec=self.row_codec,
        )

    def tick(
        self,
        batch: perception_pb2.PerceptionBatch,
        merged_results: Sequence[action_pb2.ActionIntent] = (),
        cognition_unavailable_tiers: int = 0,
        *,
        decoded: DecodedBatch | None = None,
        into: action_pb2.TickResult | None = None,
    ) -> action_pb2.TickResult:
        """Validate, then take the batch whole: signals, merged cognition results, behaviour, core.

        `cognition_unavailable_tiers` (bit t = tier t unavailable, killed or over budget) is the
        dispatcher's view of cognition for this tick; it is an input (logged, replayed), not a probe.
        `decoded` is this batch as `decode` already validated it (the servicer checks a batch before
        it takes the dispatcher's results), so a large batch is not decoded twice; `into` is an empty
        result inside the response to send, so a large answer is built in place, not copied there.
        """
        if decoded is None:
            decoded = self.decode(batch)
        merged = self._validate_results(merged_results)
        if cognition_unavailable_tiers & ~ALL_TIER_BITS:
            raise InvalidArgument.field(
                "cognition_unavailable_tiers", f"only tier bits {ALL_TIER_BITS:#x} may be set"
            )
        started = time.perf_counter_ns()  # measured for the report only; no decision reads it
        self._apply_signals(decoded)
        payloads, said = self._merge_results(merged, decoded.tick)
        escalations = self._step_behavior(decoded.tick, cognition_unavailable_tiers)
        self.core.run(self.arrays, self.core_params, tick=decoded.tick, observed_all=decoded.slots is None)
        if said:
            # A merged reply is answered as said on this tick, whatever call or guard the core put
            # over the slot's cached action (outside the core, so both cores stay as they are): a SAY
            # from cognition, never a guard's, so a world reading its answer finds the reply.
            self.arrays.fields["out_kind"][said] = action_pb2.ACTION_KIND_SAY
            self.arrays.fields["out_source"][said] = action_pb2.ACTION_SOURCE_COGNITION
        self.last_tick = decoded.tick
        guards = guard_stamps(self.arrays)
        result = action_pb2.TickResult() if into is None else into
        self._last_calls = build_tick_result(
            result,
            self.config,
            call_tables=self.call_tables,
            a=self.arrays,
            registry=self.registry,
            escalations=self._standing_escalations(escalations),
            decoded=decoded,
            guards=guards,
            merged_payloads=payloads,
            merged_count=len(merged),
            row_codec=self.row_codec,
            constants=self.report_constants,
            marks=self._answer_marks,
        )
        self._last_situations = decoded.situations
        self._last_guards = guards
        self._record_fragments(decoded.tick, merged, guards)
        for request in result.lifecycle:
            if request.kind == action_pb2.LifecycleRequest.KIND_CONSOLIDATE:
                self.fragments.take_into(request, decoded.tick)
        elapsed = (time.perf_counter_ns() - started) // 1000
        result.report.elapsed_micros = elapsed
        result.report.over_latency_budget = elapsed > self.config.latency_budget_micros
        return result

    def _standing_escalations(self, escalations: Escalations | None) -> Escalations:
        """Arbitration's escalations that still stand after the core ran: the agent is still Lachesis,
        and the core issued it no call this tick (a reflection or guard call already answers it)."""
        if escalations is None or len(escalations.slots) == 0:
            return NO_ESCALATIONS
        a = self.arrays
        slots = escalations.slots
        keep = a.fields["tier"][slots] == LACHESIS
        issued = a.outputs["candidate_slot"][: int(a.counts[COUNT_CANDIDATES])]
        if len(issued):
            # Both lists ascend, so a binary search finds each escalation's slot among the issued
            # (np.isin sorts both first: ~0.15 ms a tick at 10,200 agents).
            at = np.minimum(np.searchsorted(issued, slots), len(issued) - 1)
            keep &= issued[at] != slots
        return Escalations(slots[keep], escalations.causes[keep])

    def _record_fragments(
        self, tick: int, merged: Sequence[action_pb2.ActionIntent], guards: GuardStamps
    ) -> None:
        """What this tick did to agents above Atropos, kept for their next consolidation."""
        a = self.arrays
        tiers = a.fields["tier"]
        self.fragments.record_merged(tick, merged, tiers)
        if len(guards.slots):
            self.fragments.record_guards(tick, guards.slots, guards.bits, tiers)
        changed = a.outputs["changed_slot"][: int(a.counts[COUNT_CHANGED])]
        clotho = changed[tiers[changed] == CLOTHO].astype(np.intp)
        if len(clotho):
            self.fragments.record_actions(tick, clotho, a.fields)

    def _apply_signals(self, decoded: DecodedBatch) -> None:
        """A full frame observes every agent; a delta (or rows) only the slots it lists, which the core
        learns from AGENT_BIT_OBSERVED."""
        self.core.apply_frame(self.arrays, decoded.slots, decoded.columns)

    def _validate_results(
        self, results: Sequence[action_pb2.ActionIntent]
    ) -> Sequence[action_pb2.ActionIntent]:
        """Every merged result fits the arrays it is merged into, or InvalidArgument before the tick
        applies anything."""
        violations = [
            v for index, intent in enumerate(results) for v in self.result_violations(index, intent)
        ]
        if violations:
            raise InvalidArgument(violations)
        return results

    def result_violations(self, index: int, intent: action_pb2.ActionIntent) -> list[FieldViolation]:
        """What keeps one merged result (`merged_results[index]`) from fitting the agent arrays."""
        field = f"merged_results[{index}]"
        violations = []
        if intent.slot >= self.arrays.count:
            violations.append(FieldViolation(f"{field}.slot", f"unknown slot {intent.slot}"))
        if not 0 <= intent.kind <= MAX_ACTION_KIND:
            violations.append(FieldViolation(f"{field}.kind", f"unknown ActionKind {intent.kind}"))
        if intent.priority > MAX_BP:
            violations.append(FieldViolation(f"{field}.priority", f"must be within 0..{MAX_BP}"))
        if intent.plan_step > MAX_PLAN_STEP:
            violations.append(FieldViolation(f"{field}.plan_step", f"must be within 0..{MAX_PLAN_STEP}"))
        return violations

    def _merge_results(
        self, results: Sequence[action_pb2.ActionIntent], tick: int
    ) -> tuple[dict[int, struct_pb2.Struct], list[int]]:
        """A completed cognition call becomes the Ori's cached action from this tick on; the behaviour
        layer holds it `cognition_hold_ticks` for a Lachesis Ori, then pursues the result's goal.

        Returns the payload to answer each slot with, and the slots (ascending) whose result is a
        reply (ACTION_KIND_SAY): a reply's payload wins over another result for its slot, and its
        slot is answered on this tick even when the reply has no payload."""
        f = self.arrays.fields
        payloads: dict[int, struct_pb2.Struct] = {}
        replies: dict[int, struct_pb2.Struct] = {}
        hold_until = tick + self.config.cognition_hold_ticks
        for intent in results:
            slot = intent.slot
            f["cached_kind"][slot] = intent.kind
            f["cached_source"][slot] = action_pb2.ACTION_SOURCE_COGNITION
            f["cached_goal_ref"][slot] = intent.goal_ref
            f["cached_priority"][slot] = intent.priority
            f["cached_plan_step"][slot] = intent.plan_step
            f["agent_bits"][slot] |= AGENT_BIT_FRESH_DECISION | AGENT_BIT_COGNITION_DECIDED
            if self.behavior is not None:
                self.behavior.adopt(slot, intent.goal_ref, hold_until)
            if intent.kind == action_pb2.ACTION_KIND_SAY:
                replies[slot] = intent.payload
            elif intent.HasField("payload"):
                payloads[slot] = intent.payload
        payloads.update(replies)
        return payloads, sorted(replies)

    def _step_behavior(self, tick: int, cognition_unavailable_tiers: int) -> Escalations | None:
        """The one call site of the behaviour layer, at 10 Hz (slot-phased: an agent's turn comes when
        `(tick + slot) % lachesis_step_every_ticks == 0`): Lachesis agents step their cached plans once
        a cognition-made action's hold (`cognition_hold_ticks`) has run out, and any agent of any tier
        holding no cognition-made action falls back to the layer, so a cognition outage (or a killed
        tier, or a spent budget) leaves every Ori acting in character.

        Then arbitration over the stepped Lachesis agents: the ones it escalates (novelty, no
        structured goal, no applicable method; never while Lachesis cognition is unavailable) are
        returned for a cognition call. They keep the behaviour action meanwhile."""
        if self.behavior is None or self.arrays.count == 0:
            return None
        return self.behavior.step(
            tick,
            self.config.lachesis_step_every_ticks,
            self.arrays,
            cognition_available=not cognition_unavailable_tiers >> LACHESIS & 1,
        )

    def slot_of(self, slot: int | None, ori_id: str | None) -> int:
        """Resolve a slot or an Ori id; UnknownAgent when neither names a registered agent."""
        if ori_id is not None:
            if ori_id not in self.slot_by_ori:
                raise UnknownAgent(f"ori {ori_id!r} is not registered", "ori_id", "names no registered Ori")
            return self.slot_by_ori[ori_id]
        if slot is None or slot >= self.arrays.count:
            raise UnknownAgent(f"slot {slot} is not registered", "slot", "names no registered slot")
        return slot

    def capture_moments(self) -> Moments:
        """The moment of each call the last tick issued (copies: later ticks change nothing)."""
        return capture_moments(
            self.arrays,
            self.behavior,
            slots=self._last_calls,
            situations=self._last_situations,
            guards=self._last_guards,
            display_names=self.display_names,
        )

    def agent_state(self, slot: int) -> kernel_pb2.GetAgentStateResponse:
        """One agent's tier, guard counters, due times and cached action."""
        f = self.arrays.fields
        tier = common_pb2.CognitionTier.ValueType(int(f["tier"][slot]))
        next_call = int(f["next_call_tick"][slot])
        return kernel_pb2.GetAgentStateResponse(
            slot=slot,
            ori=self.registry.ori(slot),
            tier=tier,
            tier_reason=action_pb2.TierReason.ValueType(int(f["tier_reason"][slot])),
            ticks_in_tier=int(f["ticks_in_tier"][slot]),
            last_clotho_signal_tick=int(f["last_clotho_signal_tick"][slot]),
            cached_action=action_pb2.ActionIntent(
                slot=slot,
                ori_id=self.ori_ids[slot],
                kind=action_pb2.ActionKind.ValueType(int(f["cached_kind"][slot])),
                goal_ref=int(f["cached_goal_ref"][slot]),
                priority=int(f["cached_priority"][slot]),
                tier=tier,
                source=action_pb2.ActionSource.ValueType(int(f["cached_source"][slot])),
                plan_step=int(f["cached_plan_step"][slot]),
            ),
            repeated_action_count=int(f["repeated_action_count"][slot]),
            stale_goal_ticks=int(f["stale_goal_ticks"][slot]),
            next_reflection_tick=next_call if tier == common_pb2.COGNITION_TIER_LACHESIS else 0,
            next_summary_tick=next_call if tier == common_pb2.COGNITION_TIER_ATROPOS else 0,
            core=self.core.name,
        )

    def snapshot(self) -> kernel_pb2.KernelSnapshot:
        """The whole state: registry, last tick, every per-agent array (and the behaviour layer's)."""
        snapshot = kernel_pb2.KernelSnapshot(
            world_id=self.world_id,
            last_tick=self.last_tick or 0,
            has_ticked=self.last_tick is not None,
            ori_ids=self.ori_ids,
            tenant_ids=self.tenant_ids,
            arrays=[_named(name, values) for name, values in self.arrays.snapshot().items()],
        )
        snapshot.pending_fragments.extend(self.fragments.snapshot(self.ori_ids))
        if self.behavior is not None:
            snapshot.behavior_arrays.extend(
                _named(name, np.asarray(values)) for name, values in self.behavior.snapshot().items()
            )
        return snapshot

    def restore(self, snapshot: kernel_pb2.KernelSnapshot) -> None:
        """Become exactly the kernel that took the snapshot. The snapshot is checked whole first
        (snapshot_checks; the behaviour layer's and the fragments' own checks): one that does not
        fit, in any array or value, changes nothing."""
        arrays = decode_arrays(snapshot.arrays, "snapshot.arrays")
        behavior_arrays = decode_arrays(snapshot.behavior_arrays, "snapshot.behavior_arrays")
        agents = len(snapshot.ori_ids)
        violations = registry_violations(snapshot) + agent_violations(arrays, agents)
        if self.behavior is not None:
            violations += [
                FieldViolation(f"snapshot.behavior_arrays.{v.field}", v.description)
                for v in self.behavior.restore_violations(behavior_arrays, agents)
            ]
        if violations:
            raise InvalidArgument(violations)
        fragments = self.fragments.restored(snapshot.pending_fragments, agents)
        # Nothing below refuses: every check above ran against this very snapshot.
        if self.behavior is not None:
            self.behavior.restore(behavior_arrays, agents)
        self.world_id = snapshot.world_id
        self.last_tick = snapshot.last_tick if snapshot.has_ticked else None
        self.ori_ids = list(snapshot.ori_ids)
        self.tenant_ids = list(snapshot.tenant_ids)
        self.display_names = [""] * len(self.ori_ids)  # a snapshot holds no identities
        self.slot_by_ori = {ori_id: slot for slot, ori_id in enumerate(self.ori_ids)}
        self.arrays.restore(arrays)
        self.fragments = fragments
        self._reserve()

    def _reserve(self) -> None:
        """Size the per-slot side arrays with the agent arrays, so no tick grows one."""
        self.fragments.reserve(self.arrays.capacity)
        if len(self._answer_marks) < self.arrays.capacity:
            self._answer_marks = np.zeros(self.arrays.capacity, np.uint8)


def _named(name: str, values: np.ndarray[tuple[int], np.dtype[np.generic]]) -> kernel_pb2.NamedArray:
    little = values.astype(values.dtype.newbyteorder("<"), copy=False)
    return kernel_pb2.NamedArray(name=name, dtype=little.dtype.str, data=little.tobytes())
