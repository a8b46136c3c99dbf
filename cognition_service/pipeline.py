"""The five stages in order for one run: assemble → ground → dispatch → gate → commit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from google.protobuf import json_format

from cognition_service import commit
from cognition_service.config import CognitionConfig
from cognition_service.context import AssembledContext, ContextInput, RankedItem, assemble_context
from cognition_service.identity import identity_lines, names_of, quirk_items, relationship_items, value_items
from cognition_service.localization import native_line, template_line
from cognition_service.moment import derived_objectives, perception_items, speaker_of, stimulus_lines
from cognition_service.output_schemas import (
    OUTPUT_SCHEMAS,
    DecisionReply,
    DialogueReply,
    OutputSchemaName,
    ReflectionReply,
)
from cognition_service.peers import Peers
from cognition_service.psyche import spoken_reply_plan
from cognition_service.structured_output import AttemptRecord, generate_validated
from cognition_service.zoning import Feedback, build_envelope
from egbe.v1 import action_pb2, biography_pb2, cognition_pb2, gateway_pb2, policy_pb2
from services import tracing
from services.logging import get_logger
from services.vocabulary import TIER_NAMES

log = get_logger(__name__)

MODE_NAMES = {
    gateway_pb2.COGNITION_MODE_DIALOGUE: "dialogue",
    gateway_pb2.COGNITION_MODE_DECISION: "decision",
    gateway_pb2.COGNITION_MODE_REFLECTION: "reflection",
    gateway_pb2.COGNITION_MODE_SUMMARY: "summary",
}
SCHEMA_NAMES = {
    "dialogue": OutputSchemaName.DIALOGUE,
    "decision": OutputSchemaName.DECISION,
    "reflection": OutputSchemaName.REFLECTION,
    "summary": OutputSchemaName.SUMMARY,
}
DEFAULT_LOCALE = "en-US"


def request_id_for(ori_id: str, mode: str, fingerprint: str) -> str:
    return f"psyche:{ori_id}:{mode}:{fingerprint}"


def moment_of(request: cognition_pb2.ThinkRequest) -> action_pb2.CallMoment | None:
    return request.moment if request.HasField("moment") else None


def run_locale(request: cognition_pb2.ThinkRequest, identity: biography_pb2.OriIdentity) -> str:
    """The request's locale, else the one the Ori speaks, else en-US."""
    return request.locale or identity.locale or DEFAULT_LOCALE


def scene_of(request: cognition_pb2.ThinkRequest, memory: biography_pb2.RehydrateResponse) -> commit.Scene:
    """Whom the run answers (the line's speaker unless the request names a counterpart), the line it
    heard, its crossroads, and the recalled memories its own memory must not quote."""
    moment = moment_of(request)
    speaker_id, speaker_name = speaker_of(moment) if moment is not None else ("", "")
    addressed = request.counterpart_id or speaker_id
    names = names_of(memory.identity)
    return commit.Scene(
        addressed_to=addressed,
        addressed_name=(speaker_name if addressed == speaker_id else "") or names.get(addressed, addressed),
        heard=moment.situation.player_line.text if moment is not None else "",
        crossroads_id=moment.situation.crossroads.crossroads_id if moment is not None else "",
        recalled=tuple(m.text for m in memory.memories),
    )


def recalled_items(memories: Iterable[biography_pb2.MemoryItem]) -> list[RankedItem]:
    """The recalled memories, most salient first, each without a sentence a more salient one holds."""
    ranked = sorted(memories, key=lambda m: (-m.salience_bp, m.event_id))
    texts = commit.fold_repeats([m.text for m in ranked])
    return [RankedItem(m.event_id, t, m.salience_bp) for m, t in zip(ranked, texts, strict=True) if t]


def context_input(
    request: cognition_pb2.ThinkRequest, memory: biography_pb2.RehydrateResponse
) -> ContextInput:
    """The request's live context and moment joined with who the Ori is and what the biography remembers."""

    def items(source: Any) -> list[RankedItem]:
        return [RankedItem(i.ref, i.text, i.priority_bp) for i in source]

    identity, moment = memory.identity, moment_of(request)
    names = names_of(identity)
    if moment is not None and moment.situation.player_line.speaker_id:
        speaker_id, speaker_name = speaker_of(moment)
        names.setdefault(speaker_id, speaker_name)
    # Personality events the biography recorded rank below the kernel's live traits.
    traits = items(request.traits) + [
        RankedItem(f"personality-{i}", text, 0) for i, text in enumerate(memory.personality_events)
    ]
    arcs = f"arcs: {', '.join(memory.arc_refs)}" if memory.arc_refs else ""
    situation = stimulus_lines(moment) if moment is not None else []
    return ContextInput(
        ori_id=request.ori.ori_id,
        tier=TIER_NAMES[request.tier],
        mode=MODE_NAMES[request.mode],
        locale=run_locale(request, identity),
        stimulus="\n".join(line for line in (*situation, request.stimulus) if line),
        persona=request.persona or identity.persona,
        identity=tuple(identity_lines(identity)),
        sections={
            "perception": items(request.perception) + (perception_items(moment) if moment else []),
            "traits": traits,
            "values": value_items(identity, memory.values),
            "quirks": quirk_items(identity) + items(request.quirks),
            "memories": recalled_items(memory.memories),
            "relationships": relationship_items(identity, memory.relationships, names),
            "objectives": items(request.objectives) or derived_objectives(moment, identity),
        },
        arc_state=" ".join(p for p in (request.arc_state, arcs) if p),
        emotion=request.emotion,
    )


def evidence_for(request: cognition_pb2.ThinkRequest, context: AssembledContext) -> list[policy_pb2.Evidence]:
    """What grounds a claim: the world's established facts, the Ori's memories and its perception.

    Ids are unique in the result (the first source naming an id wins), as Ground requires.
    """
    evidence = {fact.evidence_id: fact for fact in request.world_facts}
    for section in ("memories", "perception"):
        for item in context.sections[section]:
            evidence.setdefault(item.ref, policy_pb2.Evidence(evidence_id=item.ref, text=item.text))
    return list(evidence.values())


@dataclass
class RunTrace:
    """What the run did, for the audit's eval trace."""

    started_ns: int = field(default_factory=time.perf_counter_ns)
    model_ns: int = 0
    stages_us: dict[str, int] = field(default_factory=dict)
    attempts: list[AttemptRecord] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    groundings: list[dict[str, Any]] = field(default_factory=list)
    policy: list[dict[str, Any]] = field(default_factory=list)

    def stage(self, name: str, since_ns: int) -> int:
        now = time.perf_counter_ns()
        self.stages_us[name] = self.stages_us.get(name, 0) + (now - since_ns) // 1_000
        tracing.past_span("cognition", f"cognition.{name}", since_ns, now)
        return now


class _TimedGateway:
    """Counts the time spent inside model calls, so cognition time excludes it; and stops the run at
    the first answer that names another Ori or tier than the one the call was made for."""

    def __init__(self, peers: Peers, trace: RunTrace) -> None:
        self._peers = peers
        self._trace = trace

    async def generate(self, request: gateway_pb2.GenerateRequest) -> gateway_pb2.GenerateResponse:
        started = time.perf_counter_ns()
        try:
            response = await self._peers.gateway.generate(request)
        finally:
            self._trace.model_ns += time.perf_counter_ns() - started
        commit.assert_run_is_for(request, response)
        return response


def _as_dict(message: Any) -> dict[str, Any]:
    converted: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return converted


def judged_text(reply: commit.Reply) -> str:
    """Every free-text field of a reply, so nothing the Ori would say or remember escapes the gate."""
    if isinstance(reply, DialogueReply):
        return reply.utterance
    if isinstance(reply, DecisionReply):
        return f"{reply.action} {reply.target}: {reply.rationale}"
    if isinstance(reply, ReflectionReply):
        return reply.insight
    return "\n".join([reply.summary, *reply.beats])


def _failed_checks(gate: policy_pb2.GateResponse) -> str:
    return "; ".join(f"{c.check}: {c.reason}" for c in gate.checks if not c.passed)


@dataclass
class Outcome:
    """How the dispatch-and-gate loop ended: an approved output, or the reason it fell back."""

    approved: tuple[commit.Dispatched, policy_pb2.GateResponse] | None = None
    fallback_reason: str = ""
    validation_fallbacks: int = 0
    policy_rejected: bool = False


class ThinkRun:
    """One run of the pipeline; each method is one stage, sharing the run's context and trace."""

    def __init__(
        self,
        request: cognition_pb2.ThinkRequest,
        peers: Peers,
        config: CognitionConfig,
        memory: biography_pb2.RehydrateResponse,
        trace: RunTrace,
    ) -> None:
        """Stage 1, assemble: the biography's memory joined with the request, ranked, bounded."""
        self.request = request
        self.peers = peers
        self.config = config
        self.memory = memory
        self.trace = trace
        self.mark = trace.started_ns
        self.mode = MODE_NAMES[request.mode]
        self.settings = config.modes[self.mode]
        self.schema_name = SCHEMA_NAMES[self.mode]
        self.schema = OUTPUT_SCHEMAS[self.schema_name]
        self.gateway = _TimedGateway(peers, trace)
        self.context = assemble_context(context_input(request, memory), config.limits)
        self.locale = self.context.locale
        self.scene = scene_of(request, memory)
        self.identity = commit.RunIdentity(
            run_id=request.run_id,
            ori=request.ori,
            tier=request.tier,
            mode=self.mode,
            request_id=request_id_for(request.ori.ori_id, self.mode, self.context.fingerprint),
            fingerprint=self.context.fingerprint,
            world_tick=request.world_tick,
        )
        self.evidence = evidence_for(request, self.context)
        self.stage("assemble")

    def stage(self, name: str) -> None:
        self.mark = self.trace.stage(name, self.mark)

    async def ground_request(self) -> list[str]:
        """Stage 2: ground the claims the stimulus puts to the Ori; the prompt says which hold."""
        lines: list[str] = []
        claims = self.request.claims
        if claims:
            grounding = await self.peers.policy.ground(
                policy_pb2.GroundRequest(ori=self.request.ori, claims=claims, evidence=self.evidence)
            )
            self.trace.groundings.append({"stage": "request", **_as_dict(grounding)})
            texts = {e.evidence_id: e.text for e in self.evidence}
            for claim, result in zip(claims, grounding.groundings, strict=True):
                if result.supported:
                    lines.append(f"established: {claim.text} ({', '.join(result.evidence_ids)})")
                    lines += [f"[{e}] {texts[e]}" for e in result.evidence_ids if e in texts]
                else:
                    lines.append(f"not established, do not assert: {claim.text}")
        self.stage("ground")
        return lines

    def generate_request(
        self, grounded_lines: list[str], attempt: int, feedback: Feedback | None
    ) -> gateway_pb2.GenerateRequest:
        envelope = build_envelope(
            self.context,
            self.settings,
            self.schema,
            counterpart=self.scene.addressed_to,
            grounded_evidence=grounded_lines,
            feedback=feedback,
        )
        return gateway_pb2.GenerateRequest(
            run_id=self.request.run_id,
            mode=self.request.mode,
            prompt=envelope,
            max_output_tokens=self.settings.max_output_tokens,
            request_id=self.identity.request_id,
            output_schema=self.schema_name.value,
            attempt=attempt,
            # The gateway refuses a call whose Ori or tier is not the run's admitted one.
            ori=self.request.ori,
            tier=self.request.tier,
        )

    async def ground_reply(self, dispatched: commit.Dispatched) -> str:
        """Sophia on what the reply asserts; the rejection reason, or "" when every claim holds."""
        stated = getattr(dispatched.reply, "claims", [])
        if not stated:
            return ""
        claims = [
            policy_pb2.Claim(
                claim_id=f"{dispatched.output_id}/claim-{i}",
                kind=policy_pb2.ClaimKind.Value(f"CLAIM_KIND_{c.kind.value.upper()}"),
                text=c.text,
                locale=self.locale,
            )
            for i, c in enumerate(stated)
        ]
        grounding = await self.peers.policy.ground(
            policy_pb2.GroundRequest(ori=self.request.ori, claims=claims, evidence=self.evidence)
        )
        self.trace.groundings.append({"stage": "reply", **_as_dict(grounding)})
        if grounding.passed:
            return ""
        return (
            f"sophia: {grounding.unsupported_claim_count} unsupported claim(s), "
            f"{grounding.fabricated_world_fact_count} fabricated world fact(s); assert only what the zones "
            "establish"
        )

    async def gate(self, dispatched: commit.Dispatched) -> tuple[policy_pb2.GateResponse, str]:
        """Isis on the output; the gate's answer and its failed checks ("" when approved)."""
        reply = dispatched.reply
        gate_request = policy_pb2.GateRequest(
            ori=self.request.ori,
            tier=self.request.tier,
            output_id=dispatched.output_id,
            mode=self.mode,
            utterance=judged_text(reply),
            cited_memory_refs=getattr(reply, "cited_memory_refs", []),
            claimed_capabilities=getattr(reply, "claimed_capabilities", []),
            ori_is_minor=self.request.ori_is_minor,
            counterpart_is_minor=self.request.counterpart_is_minor,
            established_memory_refs=[m.event_id for m in self.memory.memories],
            established_capabilities=self.request.capabilities,
            stimulus=self.context.stimulus,
        )
        decision = await self.peers.policy.gate(gate_request)
        self.trace.policy.append({"request": _as_dict(gate_request), "report": _as_dict(decision)})
        if decision.decision == policy_pb2.POLICY_DECISION_APPROVED:
            return decision, ""
        return decision, f"isis: {_failed_checks(decision)}"

    def calls_allowed(self) -> int:
        if self.request.max_model_calls:
            return self.request.max_model_calls
        return (self.config.max_validation_retries + 1) * (self.config.max_policy_rerequests + 1)

    async def dispatch_and_gate(self, grounded_lines: list[str]) -> Outcome:
        """Stages 3-4: validated dispatch, then Sophia and Isis; a rejection is re-asked, then falls back."""
        calls_left = self.calls_allowed()
        feedback: Feedback | None = None
        rerequests = 0
        while True:
            validated = await generate_validated(
                self.gateway,
                lambda attempt, fb: self.generate_request(grounded_lines, attempt, fb),
                self.schema,
                max_retries=self.config.max_validation_retries,
                calls_allowed=calls_left,
                first_attempt=len(self.trace.attempts) + 1,
                feedback=feedback,
            )
            self.trace.attempts += validated.attempts
            calls_left -= len(validated.attempts)
            if validated.reply is None or validated.response is None:
                self.trace.events.append(
                    {
                        "type": "validation_fallback",
                        "schema": self.schema_name.value,
                        "attempts": len(validated.attempts),
                        "errors": [a.error for a in validated.attempts],
                    }
                )
                log.warning("validation fallback", run_id=self.request.run_id, schema=self.schema_name.value)
                return Outcome(fallback_reason="validation_fallback", validation_fallbacks=1)
            # Attributed to the Ori and tier the gateway says the run was admitted for, when it says.
            dispatched = commit.Dispatched(
                ori_id=validated.response.ori.ori_id or self.request.ori.ori_id,
                tier=validated.response.tier or self.request.tier,
                output_id=f"{self.request.run_id}/{validated.attempts[-1].attempt}",
                reply=cast(commit.Reply, validated.reply),
                response=validated.response,
            )
            self.stage("dispatch")
            # Sophia and Isis judge the same output independently, so they run side by side.
            ungrounded, (decision, refused) = await asyncio.gather(
                self.ground_reply(dispatched), self.gate(dispatched)
            )
            self.stage("gate")
            rejection = "; ".join(r for r in (ungrounded, refused) if r)
            if not rejection:
                return Outcome(approved=(dispatched, decision))
            if rerequests < self.config.max_policy_rerequests and calls_left > 0:
                rerequests += 1
                feedback = Feedback(validated.response.text, f"The reply was rejected: {rejection}")
                continue
            self.trace.events.append({"type": "policy_fallback", "reason": rejection})
            return Outcome(fallback_reason="policy_rejected", policy_rejected=True)

    async def commit(self, outcome: Outcome, response: cognition_pb2.ThinkResponse) -> str:
        """Stage 5: only an approved, attributed output becomes an action and a life-event.

        Answers the fallback reason ("" when committed); a blocked dialogue line is withheld.
        """
        if outcome.approved is None:
            return outcome.fallback_reason
        dispatched, decision = outcome.approved
        commit.assert_attribution(self.identity, dispatched, decision)
        response.policy_decision = "approved"
        extra: dict[str, Any] = {}
        if isinstance(dispatched.reply, DialogueReply):
            response.line.CopyFrom(native_line(self.locale, dispatched.reply.utterance, dispatched.response))
            extra = {"locale": self.locale, "generated_natively": response.line.generated_natively}
            if not response.line.approved:
                self.trace.events.append(
                    {"type": "line_withheld", "quality_status": response.line.quality_status}
                )
                return "quality_blocked"
        response.actions.append(
            commit.action_for(self.identity, dispatched, self.settings.action_priority, extra)
        )
        event = commit.event_for(self.identity, dispatched, decision, self.scene)
        await self.peers.biography.append(commit.append_request(self.identity, [event]))
        response.committed_event_ids.append(event.event_id)
        return ""

    def spoken_reply(self, response: cognition_pb2.ThinkResponse, cognition_us: int) -> None:
        stages = self.trace.stages_us
        measured = {
            "cognition": cognition_us // 1_000,
            "grounding_and_gate": (stages.get("ground", 0) + stages.get("gate", 0)) // 1_000,
        }
        response.spoken_reply.CopyFrom(
            spoken_reply_plan(response.line.text, self.locale, measured, self.config)
        )

    def say(self, response: cognition_pb2.ThinkResponse, reason: str) -> None:
        """The dialogue's SAY carries the speech, its Psyche plan and the model time; a run that fell
        back still answers, with its labelled template line."""
        line = response.line
        if line.source == cognition_pb2.LINE_SOURCE_TEMPLATE_FALLBACK:
            source = "template-fallback"
        else:
            source = "offline" if response.offline else "model"
        extra: dict[str, Any] = {
            "speech": commit.speech(self.scene, line.text, line.locale, self.request.world_tick, source),
            "model_us": sum(a.model_latency_us for a in self.trace.attempts),
        }
        if reason:
            extra |= {"locale": line.locale, "generated_natively": False}
            priority = self.settings.action_priority
            response.actions.append(
                commit.template_say(self.identity, priority, reason, response.offline, extra)
            )
        else:
            response.actions[0].payload.update(extra)
        spoken = response.actions[-1].payload.fields["spoken_reply"].struct_value
        commit.fill_struct(response.spoken_reply, spoken)

    def audit(self, outcome: Outcome, reason: str, cognition_us: int) -> dict[str, Any]:
        """The full call: request, context, grounding, attempts, response, policy, events, eval trace."""
        trace = self.trace
        return {
            "request": _as_dict(self.request),
            "request_id": self.identity.request_id,
            "context": {
                "fingerprint": self.context.fingerprint,
                "omitted": self.context.omitted,
                "clipped": self.context.clipped,
                "chars": self.context.context_chars(),
                "stream_version": self.memory.stream_version,
                "identity_version": self.memory.identity_version,
            },
            "grounding": trace.groundings,
            "attempts": [vars(a) for a in trace.attempts],
            "response": _as_dict(outcome.approved[0].response) if outcome.approved else None,
            "policy": trace.policy,
            "events": trace.events,
            "outcome": reason or "committed",
            "eval_trace": {
                "stages_us": trace.stages_us,
                "model_us": trace.model_ns // 1_000,
                "cognition_us": cognition_us,
                "latency_budget_us": self.settings.latency_budget_us,
                "within_budget": cognition_us <= self.settings.latency_budget_us,
            },
        }


async def think(
    request: cognition_pb2.ThinkRequest, peers: Peers, config: CognitionConfig
) -> cognition_pb2.ThinkResponse:
    """Run the five stages; a peer or gateway failure propagates before anything is committed."""
    trace = RunTrace()
    memory = await peers.biography.rehydrate(biography_pb2.RehydrateRequest(ori_id=request.ori.ori_id))
    run = ThinkRun(request, peers, config, memory, trace)
    grounded_lines = await run.ground_request()
    outcome = await run.dispatch_and_gate(grounded_lines)
    response = cognition_pb2.ThinkResponse(
        fingerprint=run.context.fingerprint,
        request_id=run.identity.request_id,
        clipped=run.context.clipped,
        omitted=run.context.omitted,
        validation_fallbacks=outcome.validation_fallbacks,
        model_calls=len(run.trace.attempts),
        offline=any(a.offline for a in run.trace.attempts),
        policy_decision="rejected" if outcome.policy_rejected else "",
    )
    response.usage.input_tokens = sum(a.input_tokens for a in run.trace.attempts)
    response.usage.output_tokens = sum(a.output_tokens for a in run.trace.attempts)
    reason = await run.commit(outcome, response)
    if reason:
        response.fell_back = True
        if run.mode == "dialogue" and not response.line.text:
            response.line.CopyFrom(
                template_line(run.locale, run.scene.addressed_name, config.dialogue_templates)
            )
    run.stage("commit")
    cognition_us = (time.perf_counter_ns() - run.trace.started_ns - run.trace.model_ns) // 1_000
    if run.mode == "dialogue" and response.line.approved:
        run.spoken_reply(response, cognition_us)
        run.say(response, reason)
    response.audit.update(run.audit(outcome, reason, cognition_us))
    return response
