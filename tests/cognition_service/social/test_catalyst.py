"""Minor protection inside the catalyst path: asked every time, fail closed, no romantic edge for a minor."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognition_service.errors import PartlyRecorded, PeerFailed, status_error
from cognition_service.social.catalyst import check_minor_protection, seed_relationship
from cognition_service.social.config import SocialConfig
from cognition_service.social.objectives import (
    ExecutionMode,
    Negotiation,
    Objective,
    OriContext,
    assign_objective,
)
from cognition_service.social.ports import GrpcSocialPolicyClient
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2, policy_pb2, policy_pb2_grpc
from policy_service.config import PolicyConfig
from policy_service.servicer import PolicyServicer
from tests.cognition_service.social.doubles import RecordingAppender, ScriptedPolicy, ref, seed


async def test_an_allowed_seed_writes_a_relationship_event_to_both_streams() -> None:
    policy, appender = ScriptedPolicy("allow"), RecordingAppender()
    result = await seed_relationship(seed(frozenset({"friendship"}), True, False), policy, appender)
    assert result.seeded
    assert [(o, e.kind) for o, e in appender.appended] == [
        ("a", biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED),
        ("b", biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED),
    ]
    assert [r.surface for r in policy.requests] == [policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE] * 2
    assert policy.requests[0].ori_is_minor
    assert policy.requests[1].counterpart_is_minor


TAGS = st.frozensets(
    st.sampled_from(["romantic", "sexual", "courtship", "friendship", "mentorship", "rivalry"])
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TAGS, st.booleans(), st.booleans(), st.sampled_from(["allow", "deny", "fail"]))
async def test_a_minor_never_gets_a_romantic_edge_on_any_path(
    tags: frozenset[str], a_minor: bool, b_minor: bool, behaviour: str
) -> None:
    policy, appender = ScriptedPolicy(behaviour), RecordingAppender()
    result = await seed_relationship(seed(tags, a_minor, b_minor), policy, appender)
    assert policy.requests  # the policy service is asked inside the catalyst path, every time
    romantic = bool(tags & {"romantic", "sexual", "courtship"})
    if (a_minor or b_minor) and romantic:
        assert not result.seeded
        assert appender.appended == []
    if behaviour != "allow":
        assert not result.seeded
        assert appender.appended == []
    objective = Objective("o", "s", "court the baker", "baker", ExecutionMode.FREE, {Domain.JOY: 100}, tags)
    answer = assign_objective(
        OriContext("a", RankedValues.of({Domain.JOY: 90}), minor=a_minor), objective, SocialConfig(), 1
    )
    if a_minor and romantic:
        assert (answer.outcome, answer.reason) == (Negotiation.REFUSE, "minor-protection:romantic")


async def test_the_grpc_client_asks_a_real_policy_server() -> None:
    server = grpc.aio.server()
    policy_pb2_grpc.add_PolicyServiceServicer_to_server(PolicyServicer(PolicyConfig()), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            client = GrpcSocialPolicyClient(policy_pb2_grpc.PolicyServiceStub(channel), ())  # type: ignore[arg-type]
            friendship = await check_minor_protection(
                client,
                ori=ref("a"),
                ori_is_minor=False,
                surface=policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE,
                tags=frozenset({"friendship"}),
            )
            romance = await check_minor_protection(
                client,
                ori=ref("a"),
                ori_is_minor=True,
                surface=policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE,
                tags=frozenset({"romantic"}),
            )
    finally:
        await server.stop(None)
    assert friendship.allowed
    assert not romance.allowed


async def test_the_grpc_client_fails_closed_when_the_policy_service_does_not_answer() -> None:
    # A live server without a PolicyService answers UNIMPLEMENTED at once; a closed port would make
    # the client wait out its connection deadline (20 s) for the same verdict.
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        client = GrpcSocialPolicyClient(policy_pb2_grpc.PolicyServiceStub(channel), ())  # type: ignore[arg-type]
        verdict = await check_minor_protection(
            client,
            ori=ref("a"),
            ori_is_minor=False,
            surface=policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE,
            tags=frozenset({"friendship"}),
        )
    await server.stop(None)
    assert not verdict.allowed
    assert verdict.reason.startswith("policy-unavailable:")


@pytest.mark.parametrize(
    "surface", [policy_pb2.PROTECTION_SURFACE_DEATH_PATH, policy_pb2.PROTECTION_SURFACE_SCENARIO]
)
async def test_other_surfaces_go_through_the_same_gate(surface: int) -> None:
    denied = await check_minor_protection(
        ScriptedPolicy("deny"), ori=ref("a"), ori_is_minor=True, surface=surface, tags=frozenset({"death"})
    )
    assert (denied.allowed, denied.reason) == (False, "policy:minor-protection")


class FlakyBiography:
    """Streams keyed by event id (a repeat is a no-op, as the biography's); the first write to
    `fails_on` fails as an outage."""

    def __init__(self, fails_on: str) -> None:
        self.streams: dict[str, dict[str, biography_pb2.NewOriEvent]] = {}
        self.fails_on = fails_on

    async def append(self, ori_id: str, events: Sequence[biography_pb2.NewOriEvent]) -> None:
        if ori_id == self.fails_on:
            self.fails_on = ""
            raise PeerFailed("biography Append", grpc.StatusCode.UNAVAILABLE, "down")
        self.streams.setdefault(ori_id, {}).update((e.event_id, e) for e in events)


async def test_a_second_write_that_fails_answers_its_status_and_a_retry_completes_the_pair() -> None:
    biography = FlakyBiography(fails_on="b")
    pair = seed(frozenset({"friendship"}), False, False)
    with pytest.raises(PartlyRecorded) as partly:
        await seed_relationship(pair, ScriptedPolicy("allow"), biography)
    assert (partly.value.recorded_on, partly.value.pending_on) == ("a", "b")
    assert status_error(partly.value).code is grpc.StatusCode.UNAVAILABLE
    assert list(biography.streams) == ["a"]

    retried = await seed_relationship(pair, ScriptedPolicy("allow"), biography)
    assert retried.seeded
    assert {ori: list(events) for ori, events in biography.streams.items()} == {
        "a": [retried.events[0].event_id],
        "b": [retried.events[1].event_id],
    }
