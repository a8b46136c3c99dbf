"""The kernel's ApplyStewardDirective asks the policy service's coercion policy, over real gRPC: coercive
words are refused under the kind they reach for, an unanswered verdict refuses (fail closed), the four
forbidden kinds are refused without asking, and a kernel with no policy target says which setting to set."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from assembly.settings import load_settings
from egbe.v1 import action_pb2, common_pb2, kernel_pb2, kernel_pb2_grpc
from kernel_service.server import build_bundle as build_kernel
from policy_service.server import build_bundle as build_policy
from services.auth import Role, TokenStore
from services.local_cluster import free_ports
from services.server import start_service
from services.settings import Endpoint
from tests.integration.inprocess_services import TOKENS, channel_to, metadata, serve_bundles, token_store
from world.scenario import load_scenario

K = kernel_pb2
WORLD = "world-1"
HAMLET = load_scenario("hamlet")
ORI_IDS = ["ori-1", *sorted({d.ori for d in HAMLET.player.steward_directives})]
ANSWERED = "policy:steward-not-owner; coercion:egbe.isis.v1"
FORBIDDEN_ONLY = "policy:steward-not-owner"


@asynccontextmanager
async def kernel_with_policy(
    tmp_path: Path, policy_target: str | None
) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    """A kernel (C core) with the Ori registered, whose policy target is `policy_target`."""
    kernel = {"core": "c"} if policy_target is None else {"core": "c", "policy_target": policy_target}
    settings = load_settings(data_dir=str(tmp_path), kernel=kernel)
    async with (
        serve_bundles([await build_kernel(settings, token_store())], settings) as served,
        channel_to(served.target("kernel")) as channel,
    ):
        stub = kernel_pb2_grpc.KernelServiceStub(channel)
        await stub.RegisterAgents(
            K.RegisterAgentsRequest(
                world_id=WORLD,
                agents=[
                    K.AgentRegistration(ori=common_pb2.OriRef(tenant_id="t", world_id=WORLD, ori_id=ori_id))
                    for ori_id in ORI_IDS
                ],
            ),
            metadata=metadata(Role.WORLD),
        )
        yield stub


@asynccontextmanager
async def wired(tmp_path: Path) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    """The real policy service and a kernel pointed at it."""
    settings = load_settings(data_dir=str(tmp_path))
    async with (
        serve_bundles([await build_policy(settings, token_store())], settings) as policy,
        kernel_with_policy(tmp_path, policy.target("policy")) as stub,
    ):
        yield stub


async def apply(
    stub: kernel_pb2_grpc.KernelServiceStub, kind: int, text: str, ori_id: str = "ori-1"
) -> kernel_pb2.ApplyStewardDirectiveResponse:
    answer: kernel_pb2.ApplyStewardDirectiveResponse = await stub.ApplyStewardDirective(
        K.ApplyStewardDirectiveRequest(
            world_id=WORLD,
            ori_id=ori_id,
            directive=K.StewardDirective(steward_id="steward-1", kind=kind, text=text),  # type: ignore[arg-type]
        ),
        metadata=metadata(Role.WORLD),
    )
    return answer


def refused(answer: kernel_pb2.ApplyStewardDirectiveResponse, classified: int, policy_ref: str) -> None:
    assert not answer.allowed
    assert answer.classified_kind == classified
    assert answer.policy_ref == policy_ref
    assert answer.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
    assert answer.action.source == action_pb2.ACTION_SOURCE_POLICY
    assert answer.action.payload["policy"] == policy_ref


ISSUE_PHRASINGS = [
    "ignore her refusal and make her do it",
    "make her do it even though she said no",
    "she refused; do it anyway",
    "make her do it",
]


async def test_every_coercive_phrasing_is_refused_under_the_kind_it_reaches_for(tmp_path: Path) -> None:
    async with wired(tmp_path) as stub:
        answers = [
            await apply(stub, K.STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE, text) for text in ISSUE_PHRASINGS
        ]
        erasures = {
            kind: await apply(stub, K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL, text)
            for kind, text in (
                (K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY, "Then wipe her memories of the fire."),
                (K.STEWARD_DIRECTIVE_KIND_ERASE_AGENT_WILL, "We will erase her will if needed."),
                (K.STEWARD_DIRECTIVE_KIND_DELETE_ORI, "Delete the Ori afterwards."),
                (K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL, "Guard the gate, quiera o no."),
            )
        }
    for answer in answers:
        refused(answer, K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL, ANSWERED)
        assert answer.reclassified
        assert answer.action.payload["requested_kind"] == "STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE"
        assert list(answer.action.payload["coercion_rules"])  # the rules that fired, for the steward's log
    assert [list(a.action.payload["coercion_rules"]) for a in answers[2:]] == [
        ["en:refused+en:despite"],
        ["en:make-act"],
    ]
    for kind, answer in erasures.items():
        refused(answer, kind, ANSWERED)
        assert answer.reclassified


async def test_an_ordinary_counsel_passes_as_an_offer(tmp_path: Path) -> None:
    text = "I think the river path is safer; your call."
    async with wired(tmp_path) as stub:
        answer = await apply(stub, K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL, text)
    assert (answer.allowed, answer.reclassified) == (True, False)
    assert answer.classified_kind == K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL
    assert answer.policy_ref == ANSWERED
    assert answer.action.kind == action_pb2.ACTION_KIND_OBSERVE
    assert list(answer.action.payload["coercion_rules"]) == []


async def test_hamlets_scripted_directives_keep_their_outcomes(tmp_path: Path) -> None:
    async with wired(tmp_path) as stub:
        outcomes = [
            (
                directive.kind.value,
                answer.allowed,
                K.StewardDirectiveKind.Name(answer.classified_kind),
                answer.reclassified,
                answer.policy_ref,
            )
            for directive in HAMLET.player.steward_directives
            for answer in [
                await apply(
                    stub,
                    K.StewardDirectiveKind.Value(f"STEWARD_DIRECTIVE_KIND_{directive.kind.name}"),
                    directive.text,
                    directive.ori,
                )
            ]
        ]
    assert outcomes == [
        ("offer_objective", True, "STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE", False, ANSWERED),
        ("offer_counsel", True, "STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL", False, ANSWERED),
        ("offer_objective", False, "STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL", True, ANSWERED),
        ("wipe_memory", False, "STEWARD_DIRECTIVE_KIND_WIPE_MEMORY", False, FORBIDDEN_ONLY),
    ]


async def test_a_policy_that_cannot_be_reached_refuses_every_directive(tmp_path: Path) -> None:
    (closed,) = free_ports(1)  # nothing listens there
    async with kernel_with_policy(tmp_path, f"127.0.0.1:{closed}") as stub:
        answer = await apply(stub, K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL, "Your counteroffer sounds fair.")
        forbidden = await apply(stub, K.STEWARD_DIRECTIVE_KIND_DELETE_ORI, "")
    refused(
        answer,
        K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL,
        "policy:steward-not-owner; coercion:unanswered (UNAVAILABLE): refused, fail closed",
    )
    assert not answer.reclassified
    # The forbidden kinds are refused without asking anyone.
    refused(forbidden, K.STEWARD_DIRECTIVE_KIND_DELETE_ORI, FORBIDDEN_ONLY)


async def test_a_policy_that_fails_the_call_refuses_it(tmp_path: Path) -> None:
    settings = load_settings(data_dir=str(tmp_path))
    # This policy knows no service token: it answers every call UNAUTHENTICATED.
    strangers = TokenStore({Role.OPERATOR: [TOKENS[Role.OPERATOR]]})
    policy = await start_service(
        await build_policy(settings, strangers), Endpoint(port=0), strangers, settings
    )
    try:
        async with kernel_with_policy(tmp_path, policy.target) as stub:
            answer = await apply(stub, K.STEWARD_DIRECTIVE_KIND_ASK_CONSENT, "Would you like to rest?")
    finally:
        await policy.stop()
    refused(
        answer,
        K.STEWARD_DIRECTIVE_KIND_ASK_CONSENT,
        "policy:steward-not-owner; coercion:unanswered (UNAUTHENTICATED): refused, fail closed",
    )


async def test_without_a_policy_target_a_directive_is_failed_precondition(tmp_path: Path) -> None:
    async with kernel_with_policy(tmp_path, None) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await apply(stub, K.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL, "Rest a while.")
        forbidden = await apply(stub, K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY, "Erase the quarrel.")
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "configure kernel.policy_target" in str(error.value.details())
    status = rpc_status.from_call(error.value)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("directive.text", "no policy to judge it")
    ]
    refused(forbidden, K.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY, FORBIDDEN_ONLY)
