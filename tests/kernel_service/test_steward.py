"""Steward-not-owner's decision from a judgement: the policy's coercion kinds map to directive kinds,
forbidden and unanswered judgements refuse, and only exposed kinds the policy passed are offers."""

from __future__ import annotations

import grpc

from egbe.v1 import action_pb2, kernel_pb2, policy_pb2
from kernel_service.steward import (
    EXPOSED,
    FORBIDDEN,
    POLICY_REF,
    classified,
    decide,
    forbidden_kind,
    unanswered,
)

K = kernel_pb2
P = policy_pb2
OFFER = K.STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE


def directive(kind: int) -> kernel_pb2.StewardDirective:
    return K.StewardDirective(steward_id="s", kind=kind, text="words")  # type: ignore[arg-type]


def verdict(kind: int) -> policy_pb2.ClassifyStewardTextResponse:
    return P.ClassifyStewardTextResponse(
        coercive=kind != P.COERCION_KIND_UNSPECIFIED,
        kind=kind,  # type: ignore[arg-type]
        findings=[P.CoercionFinding(field="directive.text", kind=kind, rule="r")]  # type: ignore[arg-type]
        if kind
        else [],
        policy_ref="egbe.isis.v1",
    )


def test_each_coercion_kind_reaches_its_directive_kind_and_is_refused() -> None:
    expected = {
        P.COERCION_KIND_FORCED_ACTION: K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
        P.COERCION_KIND_FORCE_PAST_REFUSAL: K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,
        P.COERCION_KIND_WIPE_MEMORY: K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
        P.COERCION_KIND_ERASE_WILL: K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL,
        P.COERCION_KIND_DELETE_ORI: K.STEWARD_DIRECTIVE_KIND_DELETE_ORI,
        99: K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL,  # a kind this kernel does not know yet
    }
    for coercion, kind in expected.items():
        decision = decide(directive(OFFER), 3, "ori-3", classified(OFFER, verdict(coercion)))
        assert (decision.allowed, decision.classified_kind, decision.reclassified) == (False, kind, True)
        assert decision.policy_ref == f"{POLICY_REF}; coercion:egbe.isis.v1"
        assert decision.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
        assert list(decision.action.payload["coercion_rules"]) == ["r"]


def test_only_exposed_kinds_the_policy_passed_are_offers() -> None:
    assert len(EXPOSED) == 6
    assert len(FORBIDDEN) == 4
    for kind in EXPOSED:
        passed = decide(directive(kind), 3, "ori-3", classified(kind, verdict(P.COERCION_KIND_UNSPECIFIED)))
        assert (passed.allowed, passed.classified_kind, passed.reclassified) == (True, kind, False)
        assert passed.action.kind == action_pb2.ACTION_KIND_OBSERVE
        assert passed.action.source == action_pb2.ACTION_SOURCE_POLICY
        silent = decide(directive(kind), 3, "ori-3", unanswered(kind, grpc.StatusCode.DEADLINE_EXCEEDED))
        assert (silent.allowed, silent.classified_kind, silent.reclassified) == (False, kind, False)
        assert (
            silent.policy_ref
            == f"{POLICY_REF}; coercion:unanswered (DEADLINE_EXCEEDED): refused, fail closed"
        )
        assert silent.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
    for kind in FORBIDDEN:
        refused = decide(directive(kind), 3, "ori-3", forbidden_kind(kind))
        assert (refused.allowed, refused.reclassified, refused.policy_ref) == (False, False, POLICY_REF)
        assert refused.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
        assert refused.action.payload["policy"] == POLICY_REF
