"""Deterministic doubles of the ports: a scripted gateway, a recording biography, in-process policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cognition_service.peers import Peers
from egbe.v1 import biography_pb2, gateway_pb2, policy_pb2
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

    async def rehydrate(self, request: biography_pb2.RehydrateRequest) -> biography_pb2.RehydrateResponse:
        return biography_pb2.RehydrateResponse(
            ori_id=request.ori_id, stream_version=2, memories=self.memories
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
