"""Deterministic doubles of the ports: a scripted gateway, a recording biography, in-process policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cognition_service.peers import Peers
from egbe.v1 import biography_pb2, common_pb2, gateway_pb2, policy_pb2
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import OfflineAdapter
from policy_service.config import PolicyConfig
from policy_service.servicer import PolicyServicer
from services.errors import Unavailable

Script = Callable[[gateway_pb2.GenerateRequest], str]


def dialogue(utterance: str = "Good morning, Ada. The ferry runs again.", **extra: Any) -> str:
    reply = {"utterance": utterance, "addressed_to": "ada", "emotion": "warm", "cited_memory_refs": ["mem-1"]}
    return json.dumps({**reply, **extra})


@dataclass
class ScriptedGateway:
    """Answers each Generate with the next scripted text; records every request it was sent."""

    replies: list[str | Exception]
    quality_status: str = ""
    offline: bool = False
    requests: list[gateway_pb2.GenerateRequest] = field(default_factory=list)
    # The Ori and tier the run was admitted for, as a gateway names them in its answer (None: unnamed).
    run_ori: common_pb2.OriRef | None = None
    run_tier: int = 0

    async def generate(self, request: gateway_pb2.GenerateRequest) -> gateway_pb2.GenerateResponse:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return gateway_pb2.GenerateResponse(
            text=reply,
            model_ref="anthropic:claude-haiku-class-latest",
            call_id=f"call-{len(self.requests)}",
            offline=self.offline,
            quality_status=self.quality_status,
            usage={"input_tokens": 100, "output_tokens": 20},
            ori=self.run_ori,
            tier=common_pb2.CognitionTier.ValueType(self.run_tier),
        )


@dataclass
class RecordingBiography:
    memories: list[biography_pb2.MemoryItem] = field(
        default_factory=lambda: [
            biography_pb2.MemoryItem(
                event_id="mem-1", text="The flood took the old ferry.", salience_bp=9000
            ),
            biography_pb2.MemoryItem(event_id="mem-2", text="Ada taught me to mend nets.", salience_bp=7000),
        ]
    )
    appended: list[biography_pb2.AppendRequest] = field(default_factory=list)
    identity: biography_pb2.OriIdentity | None = None
    relationships: list[biography_pb2.RelationshipItem] = field(default_factory=list)

    async def rehydrate(self, request: biography_pb2.RehydrateRequest) -> biography_pb2.RehydrateResponse:
        return biography_pb2.RehydrateResponse(
            ori_id=request.ori_id,
            stream_version=2,
            memories=self.memories,
            relationships=self.relationships,
            identity=self.identity,
            identity_version=1 if self.identity is not None else 0,
        )

    async def append(self, request: biography_pb2.AppendRequest) -> biography_pb2.AppendResponse:
        self.appended.append(request)
        return biography_pb2.AppendResponse(next_expected_version=3)


class EvaluatingPolicy:
    """The real policy evaluators, called in process (the gRPC path has its own integration tests)."""

    def __init__(self) -> None:
        self._servicer = PolicyServicer(PolicyConfig())
        self.gates: list[policy_pb2.GateRequest] = []

    async def ground(self, request: policy_pb2.GroundRequest) -> policy_pb2.GroundResponse:
        return await self._servicer.Ground(request, None)  # type: ignore[arg-type]

    async def gate(self, request: policy_pb2.GateRequest) -> policy_pb2.GateResponse:
        self.gates.append(request)
        return await self._servicer.Gate(request, None)  # type: ignore[arg-type]


def outage() -> Unavailable:
    return Unavailable(
        "gateway Generate failed: UNAVAILABLE: connection refused", metadata={"peer_code": "UNAVAILABLE"}
    )


def peers(gateway: ScriptedGateway, biography: RecordingBiography | None = None) -> Peers:
    return Peers(gateway=gateway, policy=EvaluatingPolicy(), biography=biography or RecordingBiography())


ZONE_NAMES = {
    value.number: value.name.removeprefix("UNTRUSTED_ZONE_KIND_")
    for value in gateway_pb2.UntrustedZoneKind.DESCRIPTOR.values
}


@dataclass
class OfflineGateway:
    """The gateway's real offline adapter behind the GatewayPort; records every request and reply."""

    requests: list[gateway_pb2.GenerateRequest] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)

    async def generate(self, request: gateway_pb2.GenerateRequest) -> gateway_pb2.GenerateResponse:
        self.requests.append(request)
        prompt = request.prompt
        reply = await OfflineAdapter().generate(
            ModelRequest(
                system_policy=prompt.system_policy,
                task_instruction=prompt.task_instruction,
                tool_grants=tuple(prompt.tool_grants),
                untrusted=tuple(UntrustedPart(ZONE_NAMES[z.kind], z.content) for z in prompt.untrusted),
                output_schema=request.output_schema,
                max_output_tokens=request.max_output_tokens,
            )
        )
        self.replies.append(reply.text)
        return gateway_pb2.GenerateResponse(
            text=reply.text,
            model_ref=OfflineAdapter.name,
            call_id=f"call-{len(self.requests)}",
            offline=True,
            model_latency_us=250,
        )


def identity(**overrides: Any) -> biography_pb2.OriIdentity:
    """Adaeze as the hamlet authors her."""
    fields: dict[str, Any] = {
        "display_name": "Adaeze the smith",
        "vocation": "smith",
        "home": "The cottages",
        "locale": "en-US",
        "personality": [
            biography_pb2.TraitLevel(axis="warmth", level_bp=7200),
            biography_pb2.TraitLevel(axis="conscientiousness", level_bp=8200),
        ],
        "values": [
            biography_pb2.ValueItem(value_ref="craft", weight_bp=9400),
            biography_pb2.ValueItem(value_ref="kinship", weight_bp=8100),
        ],
        "quirks": ["hums while she works", "counts hammer strokes"],
        "needs": biography_pb2.NeedsBaseline(safety_bp=1000, social_bp=3000, purpose_bp=4200),
        "relationships": [
            biography_pb2.IdentityRelationship(
                other_ori_id="kunle", other_name="Kunle", kind="apprentice", affinity_bp=7200
            ),
            biography_pb2.IdentityRelationship(
                other_ori_id="ireti", other_name="Ireti", kind="rival", affinity_bp=-2100
            ),
        ],
        "persona": "I shoe the hamlet's horses and mend its ploughs.",
    }
    fields.update(overrides)
    return biography_pb2.OriIdentity(**fields)
