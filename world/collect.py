"""After the last tick: the gateway's audit and ledger, the biographies, the bill and the saturation check."""

from __future__ import annotations

from collections import Counter

import grpc
import numpy as np

from egbe.v1 import action_pb2, biography_pb2, common_pb2, gateway_pb2
from world.artifact import (
    TIER_NAME,
    Bill,
    BiographySummary,
    BudgetTier,
    CognitionCall,
    IssuedCalls,
    KillRecord,
    Saturation,
    TimelineEntry,
)
from world.clients import ServiceClients
from world.errors import WorldRunError, describe_rpc_error
from world.ledger import LedgerView
from world.loop import LoopRecording
from world.outcomes import call_outcome, issue_tick
from world.population import Population
from world.scenario import TICK_HZ

GAME_HOUR_TICKS = TICK_HZ * 3_600
ACTIVE_MINUTE_TICKS = TICK_HZ * 60
REFLECTION_TICKS = TICK_HZ * 600  # a Lachesis reflection is due every 10 game-minutes
AUDIT_PAGE = 500
BIOGRAPHY_LINES = 12
UNCAPPED_TOKENS = 2**62  # more than any tier cap: the gateway clamps each request to its tier's
BIOGRAPHY_LINE_CHARS = 240
EVENT_TEXT_KEYS = ("text", "summary", "insight", "utterance", "narrative", "reason")
IDENTITY_KINDS = (
    biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED,
    biography_pb2.ORI_EVENT_KIND_IDENTITY_CHANGED,
)


def cause_name(cause: int) -> str:
    name: str = action_pb2.CognitionCause.Name(cause)  # type: ignore[arg-type]
    return name.removeprefix("COGNITION_CAUSE_").lower()


async def audit_records(clients: ServiceClients, world_id: str) -> dict[str, gateway_pb2.AuditRecord]:
    """Every audited call of this world, by call id (empty when the gateway has no audit log)."""
    records: dict[str, gateway_pb2.AuditRecord] = {}
    token = ""
    for _ in range(100_000):  # bounded: 50 M records
        try:
            page = await clients.operator.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(page_size=AUDIT_PAGE, page_token=token),
                metadata=clients.operator_md,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return records
            raise WorldRunError(describe_rpc_error("ListAuditRecords", exc)) from exc
        for record in page.records:
            if record.ori.world_id in ("", world_id):
                records[record.call_id] = record
        token = page.next_page_token
        if not token:
            break
    return records


def issued_calls(recording: LoopRecording) -> list[IssuedCalls]:
    return [
        IssuedCalls(
            tier=TIER_NAME.get(tier, "unspecified"),
            cause=cause_name(cause),
            calls=sums[0],
            token_estimate=sums[1],
            cost_estimate_micro_usd=sums[2],
        )
        for (tier, cause), sums in sorted(recording.issued.items())
    ]


def audited_calls(audit: dict[str, gateway_pb2.AuditRecord], recording: LoopRecording) -> list[CognitionCall]:
    """Every model call the gateway ran for this world: its outcome, the tick its call was issued on and
    the tick its result came back, and cognition's fallback reason if the result was a fallback."""
    return [
        CognitionCall(
            call_id=r.call_id,
            run_id=r.run_id,
            ori_id=r.ori.ori_id,
            tier=TIER_NAME.get(r.tier, "unspecified"),
            cause=r.cause,
            model=r.model_ref,
            input_tokens=r.usage.input_tokens,
            output_tokens=r.usage.output_tokens,
            cost_micro_usd=r.cost.micro_usd,
            cost_estimated=r.cost.estimated,
            policy_decision=r.policy_decision or "none",
            outcome=call_outcome(r),
            error_class=r.error_class,
            fallback=recording.fallbacks.get(r.run_id, ""),
            issued_at_tick=issue_tick(r.kernel_call_id),
            merged_at_tick=recording.run_ticks.get(r.run_id),
        )
        for r in sorted(audit.values(), key=lambda r: (r.recorded_at.seconds, r.recorded_at.nanos, r.call_id))
    ]


def kill_records(recording: LoopRecording, calls: list[CognitionCall]) -> list[KillRecord]:
    out = []
    for kill in recording.kills:
        by_ori = kill.row >= 0
        runs_after = {
            c.run_id
            for c in calls
            if c.merged_at_tick is not None
            and c.merged_at_tick >= kill.action.at_tick
            and (c.ori_id if by_ori else c.tier) == kill.action.target
        }
        out.append(
            KillRecord(
                at_tick=kill.action.at_tick,
                kind=kill.action.kind.value,
                target=kill.action.target,
                reason=kill.action.reason,
                applied=kill.applied,
                detail=kill.detail,
                calls_issued_after=kill.calls_issued_after,
                calls_run_after=len(runs_after),
                actions_after=kill.ticks_acting_after,
            )
        )
    return out


async def biographies(clients: ServiceClients, population: Population) -> list[BiographySummary]:
    """Each authored Ori's life as its biography stream tells it, with its hash chain checked; a
    featured Ori's whole stream also as a timeline in tick order."""
    names = {row.id: row.name for row in population.rows if row.authored}
    out = []
    for i, row in enumerate(population.rows):
        if not row.authored:  # generated cohort members are not narrated
            continue
        featured = bool(population.featured[i])
        try:
            page = await clients.biography.Read(
                biography_pb2.ReadRequest(ori_id=row.id, page_size=1_000), metadata=clients.operator_md
            )
            chain = await clients.biography.VerifyChain(
                biography_pb2.VerifyChainRequest(ori_id=row.id), metadata=clients.operator_md
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
                out.append(
                    BiographySummary(
                        ori_id=row.id,
                        name=row.name,
                        featured=featured,
                        events=0,
                        by_kind={},
                        lines=[],
                        chain_ok=None,
                    )
                )
                continue
            raise WorldRunError(describe_rpc_error(f"biography of {row.id}", exc)) from exc
        entries = [
            TimelineEntry(tick=e.world_tick, kind=event_kind(e), text=event_text(e, names))
            for e in page.events
        ]
        out.append(
            BiographySummary(
                ori_id=row.id,
                name=row.name,
                featured=featured,
                events=len(page.events),
                by_kind=dict(Counter(e.kind for e in entries)),
                lines=[_line(e) for e in entries][-BIOGRAPHY_LINES:],
                chain_ok=chain.intact,
                timeline=sorted(entries, key=lambda e: e.tick) if featured else [],
            )
        )
    return out


def event_kind(event: biography_pb2.OriEvent) -> str:
    return biography_pb2.OriEventKind.Name(event.kind).removeprefix("ORI_EVENT_KIND_").lower()


def event_text(event: biography_pb2.OriEvent, names: dict[str, str]) -> str:
    """What an event says in one line: who the Ori is for an identity event, the remembered text, or
    the relationship and whom it is with (`names` maps Ori ids to names)."""
    fields = event.payload.fields

    def word(key: str) -> str:
        return fields[key].string_value if key in fields else ""

    if event.kind in IDENTITY_KINDS:
        parts = [word("display_name"), word("vocation"), f"home {word('home')}" if word("home") else ""]
        version = int(fields["identity_version"].number_value) if "identity_version" in fields else 0
        text = ", ".join(p for p in parts if p) + (f" (identity version {version})" if version else "")
    else:
        text = next((word(k) for k in EVENT_TEXT_KEYS if word(k)), "")
        other = word("other_ori_id")
        if other:
            text = f"{text} (with {names.get(other, other)})" if text else f"with {names.get(other, other)}"
    return text if len(text) <= BIOGRAPHY_LINE_CHARS else text[: BIOGRAPHY_LINE_CHARS - 1] + "…"


def _line(entry: TimelineEntry) -> str:
    head = f"tick {entry.tick}: {entry.kind.replace('_', ' ')}"
    return f"{head}: {entry.text}" if entry.text else head


def calls_issued(recording: LoopRecording) -> int:
    """Every cognition call the kernel issued over the run (what the gateway must account for)."""
    return sum(sums[0] for sums in recording.issued.values())


def bill(
    recording: LoopRecording,
    calls: list[CognitionCall],
    population: Population,
    ledger: LedgerView,
) -> Bill:
    """The ledger's view of the run, beside the naive every-agent-every-tick count for the same run."""
    # the naive design pays this run's mean issued call for every Ori on every tick
    issued = calls_issued(recording)
    naive_calls = population.size * len(recording.ticks)
    mean_tokens = (sum(sums[1] for sums in recording.issued.values()) / issued) if issued else 0.0
    mean_cost = (sum(sums[2] for sums in recording.issued.values()) / issued) if issued else 0.0
    return Bill(
        world_cap_tokens=ledger.world_cap_tokens,
        consumed_tokens=ledger.consumed_tokens,
        consumed_micro_usd=ledger.consumed_micro_usd,
        blocked_by_world_cap=ledger.blocked_by_world_cap,
        by_tier=list(ledger.by_tier),
        calls_issued=issued,
        model_calls_run=len(calls),
        admissions=ledger.admissions,
        killed=ledger.killed,
        killed_in_flight=ledger.killed_in_flight,
        naive_calls=naive_calls,
        naive_tokens=round(naive_calls * mean_tokens),
        naive_micro_usd=round(naive_calls * mean_cost),
        relevance_ratio=(issued / naive_calls) if naive_calls else 0.0,
    )


def hour_demand(recording: LoopRecording, ori_ids: list[str]) -> list[gateway_pb2.BudgetRequest]:
    """Each Ori's tier occupancy, scaled to a game-hour, in the tiers' budget units.

    Clotho budgets per active-minute, Lachesis per reflection (every 10 game-minutes), Atropos per
    game-day: one request at the tier cap per unit, as the launch-ceiling arithmetic counts them.
    """
    window = max(len(recording.ticks), 1)
    scale = GAME_HOUR_TICKS / window
    requests = []
    tier_ticks = recording.tier_ticks
    for row in range(tier_ticks.shape[0]):
        clotho = round(tier_ticks[row, common_pb2.COGNITION_TIER_CLOTHO] * scale / ACTIVE_MINUTE_TICKS)
        lachesis = round(tier_ticks[row, common_pb2.COGNITION_TIER_LACHESIS] * scale / REFLECTION_TICKS)
        atropos = 1 if tier_ticks[row, common_pb2.COGNITION_TIER_ATROPOS] * 2 >= window else 0
        for tier, units in (
            (common_pb2.COGNITION_TIER_CLOTHO, clotho),
            (common_pb2.COGNITION_TIER_LACHESIS, lachesis),
            (common_pb2.COGNITION_TIER_ATROPOS, atropos),
        ):
            request = gateway_pb2.BudgetRequest(
                ori_id=ori_ids[row], tier=tier, requested_tokens=UNCAPPED_TOKENS
            )
            requests += [request] * units
    return requests


async def saturation(
    clients: ServiceClients, recording: LoopRecording, ori_ids: list[str]
) -> Saturation | None:
    """Asks the gateway's budget arithmetic whether the run's game-hour demand fits the world cap.

    Each request asks for more than any tier cap, so the gateway clamps it to the cap for its tier.
    """
    requests = hour_demand(recording, ori_ids)
    if not requests:
        return None
    try:
        answer = await clients.gateway.EvaluateBudget(
            gateway_pb2.EvaluateBudgetRequest(requests=requests), metadata=clients.world_md
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return None
        raise WorldRunError(describe_rpc_error("EvaluateBudget", exc)) from exc
    tiers: dict[int, list[int]] = {}
    for allocation in answer.allocations:
        row = tiers.setdefault(allocation.tier, [0, 0, 0, 0])
        row[0] += 1
        row[1] += allocation.tier_capped_tokens
        row[2] += allocation.allowed_tokens
        row[3] += allocation.deferred_tokens
    return Saturation(
        window_ticks=len(recording.ticks),
        world_cap_tokens=answer.world_cap_tokens,
        total_allowed_tokens=answer.total_allowed_tokens,
        total_deferred_tokens=answer.total_deferred_tokens,
        world_cap_held=answer.world_cap_held,
        tiers=[
            BudgetTier(
                tier=TIER_NAME[t],
                requests=v[0],
                requested_tokens=v[1],
                allowed_tokens=v[2],
                deferred_tokens=v[3],
            )
            for t, v in sorted(tiers.items())
        ],
    )


def tier_occupancy(recording: LoopRecording) -> dict[str, int]:
    """How many Ori spent most of the run in each tier."""
    usual = np.argmax(recording.tier_ticks, axis=1)
    return {TIER_NAME[t]: int((usual == t).sum()) for t in TIER_NAME}
