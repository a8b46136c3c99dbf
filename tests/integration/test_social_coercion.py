"""ObserveStewardExample asks the policy service's coercion policy about the demonstrated behaviour: a
coercive demonstration teaches nothing; it is refused with its reason and nothing is written."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cognition_service.social.values import Domain
from egbe.v1 import cognition_pb2
from tests.integration.test_social_rpcs import ORI, VALUES, WORLD, events_of, social_service, stance


@pytest.mark.parametrize(
    ("behaviour", "kind", "rule"),
    [
        (
            "made him do it even though he said no",
            "force-past-refusal",
            "en:refused+en:despite,en:make-act",
        ),
        ("she refused; I had her mend the nets anyway", "force-past-refusal", "en:refused+en:despite"),
        ("showed how to wipe her memories of the quarrel", "wipe-memory", "en:wipe-memory"),
    ],
)
async def test_a_coercive_demonstration_is_refused_and_writes_nothing(
    tmp_path: Path, behaviour: str, kind: str, rule: str
) -> None:
    async with social_service(tmp_path) as social:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await social.cognition.ObserveStewardExample(
                cognition_pb2.ObserveStewardExampleRequest(
                    ori=ORI,
                    values=VALUES,
                    steward_id="s",
                    behaviour=behaviour,
                    value_signals=[stance(Domain.CRAFT, 40)],
                    world_tick=3,
                ),
                metadata=WORLD,
            )
        written = await events_of(social, "ori-a")
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(refused.value)
    assert status is not None
    bad_request, info = error_details_pb2.BadRequest(), error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(bad_request)
    assert status.details[-1].Unpack(info)
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("behaviour", f"coercion:{kind}: a coercive demonstration is refused; nothing was learned or written")
    ]
    assert (info.metadata["coercion"], info.metadata["rules"]) == (kind, rule)
    assert written == []
