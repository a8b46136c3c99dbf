"""The stages' ports over real gRPC: gateway, policy and biography stubs with a service token and deadline."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from cognition_service.errors import DeadlineSpent, PeerFailed
from cognition_service.peers import Peers
from cognition_service.social.config import SocialConfig
from cognition_service.social.layer import SocialLayer
from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    policy_pb2,
    policy_pb2_grpc,
)
from services.auth import bearer_metadata
from services.channels import ChannelOpener
from services.deadlines import onward_timeout
from services.errors import peer_violations

_NAMES_OUR_FIELDS = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT})


class _Caller:
    """Calls one peer with the token and deadline; a failed call becomes the matching domain error.

    The deadline is `timeout` seconds, or the time the call being served has left less `margin`
    (kept to answer in) when that is sooner; once that time is spent no call is sent.
    """

    def __init__(
        self, peer: str, metadata: tuple[tuple[str, str], ...], timeout: float, margin: float
    ) -> None:
        self._peer = peer
        self._metadata = metadata
        self._timeout = timeout
        self._margin = margin

    async def call(self, rpc: Callable[..., Any], name: str, request: Any) -> Any:
        timeout = onward_timeout(self._timeout, self._margin)
        if timeout <= 0:
            raise DeadlineSpent(f"{self._peer} {name}", "not sent: the caller's deadline has passed")
        try:
            return await rpc(request, metadata=self._metadata, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            # Under the caller's deadline the caller's time ran out; under our own timeout the peer was slow.
            if code is grpc.StatusCode.DEADLINE_EXCEEDED and timeout < self._timeout:
                raise DeadlineSpent(f"{self._peer} {name}", "cut off at the caller's deadline") from error
            # An unknown id or a refused value names a field of ours (the same field the peer named).
            named = peer_violations(error) if code in _NAMES_OUR_FIELDS else ()
            raise PeerFailed(f"{self._peer} {name}", code, str(error.details()), named) from error


class GatewayClient:
    def __init__(self, channel: grpc.aio.Channel, caller: _Caller) -> None:
        self._stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        self._caller = caller

    async def generate(self, request: gateway_pb2.GenerateRequest) -> gateway_pb2.GenerateResponse:
        response: gateway_pb2.GenerateResponse = await self._caller.call(
            self._stub.Generate, "Generate", request
        )
        return response


class PolicyClient:
    def __init__(self, channel: grpc.aio.Channel, caller: _Caller) -> None:
        self._stub = policy_pb2_grpc.PolicyServiceStub(channel)
        self._caller = caller

    async def ground(self, request: policy_pb2.GroundRequest) -> policy_pb2.GroundResponse:
        response: policy_pb2.GroundResponse = await self._caller.call(self._stub.Ground, "Ground", request)
        return response

    async def gate(self, request: policy_pb2.GateRequest) -> policy_pb2.GateResponse:
        response: policy_pb2.GateResponse = await self._caller.call(self._stub.Gate, "Gate", request)
        return response

    async def check_minor_protection(
        self, request: policy_pb2.CheckMinorProtectionRequest
    ) -> policy_pb2.CheckMinorProtectionResponse:
        response: policy_pb2.CheckMinorProtectionResponse = await self._caller.call(
            self._stub.CheckMinorProtection, "CheckMinorProtection", request
        )
        return response

    async def classify_steward_text(
        self, request: policy_pb2.ClassifyStewardTextRequest
    ) -> policy_pb2.ClassifyStewardTextResponse:
        response: policy_pb2.ClassifyStewardTextResponse = await self._caller.call(
            self._stub.ClassifyStewardText, "ClassifyStewardText", request
        )
        return response


class BiographyClient:
    def __init__(self, channel: grpc.aio.Channel, caller: _Caller) -> None:
        self._stub = biography_pb2_grpc.BiographyServiceStub(channel)
        self._caller = caller

    async def rehydrate(self, request: biography_pb2.RehydrateRequest) -> biography_pb2.RehydrateResponse:
        response: biography_pb2.RehydrateResponse = await self._caller.call(
            self._stub.Rehydrate, "Rehydrate", request
        )
        return response

    async def append(self, request: biography_pb2.AppendRequest) -> biography_pb2.AppendResponse:
        response: biography_pb2.AppendResponse = await self._caller.call(self._stub.Append, "Append", request)
        return response


class SocialEventAppender:
    """The social layer's EventAppender over the biography client (any expected version; the
    drafts' deterministic ids make a retried append idempotent)."""

    def __init__(self, biography: BiographyClient) -> None:
        self._biography = biography

    async def append(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        await self._biography.append(
            biography_pb2.AppendRequest(
                ori_id=ori_id,
                events=events,
                expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
            )
        )


class GrpcPeers:
    """Channels to the three peers, opened on first use (in `egbe up` the peers publish after we start)."""

    def __init__(
        self,
        targets: Callable[[], Mapping[str, str]],
        token: Callable[[], str],
        *,
        timeout_seconds: float,
        deadline_margin_seconds: float,
        dial: ChannelOpener,
    ) -> None:
        self._targets = targets
        self._token = token
        self._timeout = timeout_seconds
        self._margin = deadline_margin_seconds
        self._dial = dial
        self._channels: list[grpc.aio.Channel] = []
        self._peers: Peers | None = None
        self._policy: PolicyClient | None = None
        self._biography: BiographyClient | None = None

    def peers(self) -> Peers:
        if self._peers is None:
            targets = self._targets()
            metadata = bearer_metadata(self._token())

            def channel(name: str) -> tuple[grpc.aio.Channel, _Caller]:
                opened = self._dial(targets[name])
                self._channels.append(opened)
                return opened, _Caller(name, metadata, self._timeout, self._margin)

            self._policy = PolicyClient(*channel("policy"))
            self._biography = BiographyClient(*channel("biography"))
            self._peers = Peers(
                gateway=GatewayClient(*channel("gateway")), policy=self._policy, biography=self._biography
            )
        return self._peers

    def social(self, config: SocialConfig) -> SocialLayer:
        """The social layer over the same channels: events to the biography, minor checks to policy."""
        self.peers()
        assert self._policy is not None
        assert self._biography is not None
        return SocialLayer(SocialEventAppender(self._biography), self._policy, config)

    async def close(self) -> None:
        for opened in self._channels:
            await opened.close(None)
        self._channels.clear()
        self._peers = None
        self._policy = None
        self._biography = None
