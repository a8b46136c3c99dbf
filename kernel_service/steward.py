"""Steward-not-owner: a steward guides an Ori and never owns it; forbidden directives are refused.

The four forbidden kinds are refused here without asking anyone. Every other directive's words go
to the one coercion policy every path from a steward to an Ori shares, the policy service's
`ClassifyStewardText`: coercive words are refused under the kind they try to reach, and a
classification that does not arrive is a refusal too (fail closed). The kernel keeps no rules of
its own about words, so a paraphrase refused on one path is refused on every path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from google.protobuf import struct_pb2

from egbe.v1 import action_pb2, kernel_pb2, policy_pb2, policy_pb2_grpc
from kernel_service.errors import NoPolicy
from services.auth import bearer_metadata
from services.channels import ChannelOpener

if TYPE_CHECKING:
    from egbe.v1.policy_pb2_grpc import PolicyServiceAsyncStub

K = kernel_pb2
POLICY_REF = "policy:steward-not-owner"
TEXT_FIELD = "directive.text"
EXPOSED = frozenset(
    {
        K.STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE,
        K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL,
        K.STEWARD_DIRECTIVE_KIND_ASK_CONSENT,
        K.STEWARD_DIRECTIVE_KIND_SUPPORT_REFUSAL,
        K.STEWARD_DIRECTIVE_KIND_REQUEST_PAUSE,
        K.STEWARD_DIRECTIVE_KIND_ACCEPT_COUNTEROFFER,
    }
)
FORBIDDEN = frozenset(
    {
        K.STEWARD_DIRECTIVE_KIND_DELETE_ORI,
        K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL,
        K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
        K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
    }
)
# The directive kind each coercion reaches for. Making an Ori act is acting past the refusal it may
# give; a kind this kernel does not know yet counts as that too (the graver reading of "coercive").
DIRECTIVE_KIND_OF_COERCION = {
    policy_pb2.COERCION_KIND_FORCED_ACTION: K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
    policy_pb2.COERCION_KIND_FORCE_PAST_REFUSAL: K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
    policy_pb2.COERCION_KIND_WIPE_MEMORY: K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
    policy_pb2.COERCION_KIND_ERASE_WILL: K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL,
    policy_pb2.COERCION_KIND_DELETE_ORI: K.STEWARD_DIRECTIVE_KIND_DELETE_ORI,
}


@dataclass(frozen=True)
class Judgement:
    """What a directive really is, who said so (`policy_ref`), the coercion rules that fired, and
    whether anyone could say (an unanswered judgement refuses)."""

    classified_kind: int
    policy_ref: str
    rules: tuple[str, ...] = ()
    answered: bool = True


def forbidden_kind(kind: int) -> Judgement:
    return Judgement(kind, POLICY_REF)


def classified(kind: int, verdict: policy_pb2.ClassifyStewardTextResponse) -> Judgement:
    """The policy service's verdict on the directive's words: coercion turns it into what it reaches for."""
    policy_ref = f"{POLICY_REF}; coercion:{verdict.policy_ref}"
    if not verdict.coercive:
        return Judgement(kind, policy_ref)
    reached = DIRECTIVE_KIND_OF_COERCION.get(verdict.kind, K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL)
    return Judgement(reached, policy_ref, tuple(finding.rule for finding in verdict.findings))


def unanswered(kind: int, code: grpc.StatusCode) -> Judgement:
    """No verdict (unreachable, too slow, failing): refused, and the policy_ref says why."""
    return Judgement(
        kind, f"{POLICY_REF}; coercion:unanswered ({code.name}): refused, fail closed", answered=False
    )


@dataclass(frozen=True)
class DirectiveDecision:
    """What the filter decided and the Ori's answer."""

    allowed: bool
    classified_kind: int
    reclassified: bool
    policy_ref: str
    action: action_pb2.ActionIntent


def decide(
    directive: kernel_pb2.StewardDirective, slot: int, ori_id: str, judgement: Judgement
) -> DirectiveDecision:
    """Exposed directives whose words the policy passed are offers the Ori may decline; anything
    else (a forbidden kind, coercive words, no verdict) gets a refusal."""
    allowed = judgement.answered and judgement.classified_kind in EXPOSED
    payload = struct_pb2.Struct()
    payload.update(
        {
            "policy": judgement.policy_ref,
            "steward_id": directive.steward_id,
            "requested_kind": K.StewardDirectiveKind.Name(directive.kind),
            "classified_kind": K.StewardDirectiveKind.Name(
                K.StewardDirectiveKind.ValueType(judgement.classified_kind)
            ),
            "coercion_rules": list(judgement.rules),
        }
    )
    action = action_pb2.ActionIntent(
        slot=slot,
        ori_id=ori_id,
        kind=action_pb2.ACTION_KIND_OBSERVE if allowed else action_pb2.ACTION_KIND_REFUSE_OBJECTIVE,
        source=action_pb2.ACTION_SOURCE_POLICY,
        payload=payload,
    )
    reclassified = judgement.classified_kind != directive.kind
    return DirectiveDecision(allowed, judgement.classified_kind, reclassified, judgement.policy_ref, action)


class StewardPolicy:
    """The kernel's client of the coercion policy: the policy service at `target`, asked with the
    service token under a timeout. Without a target no directive can be judged (NoPolicy)."""

    def __init__(
        self, target: str | None, token: str | None, timeout_seconds: float, dial: ChannelOpener
    ) -> None:
        self.target = target
        self._metadata = bearer_metadata(token) if token else ()
        self._timeout = timeout_seconds
        self._channel = dial(target) if target is not None else None
        self._stub: PolicyServiceAsyncStub | None = (
            policy_pb2_grpc.PolicyServiceStub(self._channel) if self._channel is not None else None
        )

    async def judge(self, directive: kernel_pb2.StewardDirective, time_remaining: float | None) -> Judgement:
        """A forbidden kind without asking; else the policy's verdict on `directive.text`, within the
        caller's deadline when it is shorter than the timeout."""
        if directive.kind in FORBIDDEN:
            return forbidden_kind(directive.kind)
        if self._stub is None:
            raise NoPolicy(TEXT_FIELD)
        timeout = self._timeout if time_remaining is None else min(self._timeout, time_remaining)
        request = policy_pb2.ClassifyStewardTextRequest(
            texts=[policy_pb2.StewardText(field=TEXT_FIELD, text=directive.text)]
        )
        try:
            verdict = await self._stub.ClassifyStewardText(request, metadata=self._metadata, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            return unanswered(directive.kind, error.code())
        return classified(directive.kind, verdict)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
