"""What the social layer needs from other services, as injected Protocols (gRPC adapters below)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from egbe.v1 import biography_pb2, biography_pb2_grpc, policy_pb2, policy_pb2_grpc


class MinorProtectionClient(Protocol):
    """The policy service's CheckMinorProtection."""

    async def check_minor_protection(
        self, request: policy_pb2.CheckMinorProtectionRequest
    ) -> policy_pb2.CheckMinorProtectionResponse: ...


class SocialPolicyClient(MinorProtectionClient, Protocol):
    """What the social layer asks the policy service: minor protection and the coercion policy."""

    async def classify_steward_text(
        self, request: policy_pb2.ClassifyStewardTextRequest
    ) -> policy_pb2.ClassifyStewardTextResponse: ...


class EventAppender(Protocol):
    """Appends event drafts to one Ori's biography stream (idempotent by event_id)."""

    async def append(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None: ...


class GrpcSocialPolicyClient:
    """SocialPolicyClient over the policy service's gRPC stub."""

    def __init__(
        self, stub: policy_pb2_grpc.PolicyServiceAsyncStub, metadata: tuple[tuple[str, str], ...]
    ) -> None:
        self._stub = stub
        self._metadata = metadata

    async def check_minor_protection(
        self, request: policy_pb2.CheckMinorProtectionRequest
    ) -> policy_pb2.CheckMinorProtectionResponse:
        response: policy_pb2.CheckMinorProtectionResponse = await self._stub.CheckMinorProtection(
            request, metadata=self._metadata
        )
        return response

    async def classify_steward_text(
        self, request: policy_pb2.ClassifyStewardTextRequest
    ) -> policy_pb2.ClassifyStewardTextResponse:
        response: policy_pb2.ClassifyStewardTextResponse = await self._stub.ClassifyStewardText(
            request, metadata=self._metadata
        )
        return response


class GrpcEventAppender:
    """EventAppender over the biography service's gRPC stub (expected version: any)."""

    def __init__(
        self, stub: biography_pb2_grpc.BiographyServiceAsyncStub, metadata: tuple[tuple[str, str], ...]
    ) -> None:
        self._stub = stub
        self._metadata = metadata

    async def append(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        await self._stub.Append(
            biography_pb2.AppendRequest(
                ori_id=ori_id,
                events=events,
                expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
            ),
            metadata=self._metadata,
        )
