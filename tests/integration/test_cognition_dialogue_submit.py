"""A player's line through `egbe up`: Submit carries the moment to Think, the Ori answers as itself."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format
from grpc_status import rpc_status

from egbe.v1 import (
    action_pb2,
    biography_pb2,
    biography_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    perception_pb2,
)
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.cognition_service.doubles import identity
from tests.conftest import EmbeddedEgbe, dialogue_submit

LINE = "Adaeze, can the new plough share be ready by the harvest?"


def _submit(call_id: str, ori_id: str, text: str = LINE) -> gateway_pb2.SubmitRequest:
    submit = dialogue_submit(call_id, ori_id, "moment-world")
    submit.ClearField("stimulus")
    submit.candidate.tick = 700
    submit.candidate.moment.CopyFrom(
        action_pb2.CallMoment(
            situation=perception_pb2.SituationText(
                slot=0,
                player_line=perception_pb2.SpokenLine(
                    speaker_id="player-1", speaker_name="the traveller", text=text
                ),
                place="Adaeze's smithy",
            ),
            player_proximity_mm=2_500,
            emotion="determined",
        )
    )
    return submit


async def test_an_addressed_ori_answers_the_speaker_in_its_own_locale(embedded_egbe: EmbeddedEgbe) -> None:
    service = bearer_metadata(embedded_egbe.tokens["service"])
    operator = bearer_metadata(embedded_egbe.tokens["operator"])
    async with (
        grpc.aio.insecure_channel(embedded_egbe.targets["gateway"]) as channel,
        grpc.aio.insecure_channel(embedded_egbe.targets["biography"]) as biography_channel,
    ):
        await biography_pb2_grpc.BiographyServiceStub(biography_channel).RegisterIdentities(
            biography_pb2.RegisterIdentitiesRequest(
                registrations=[
                    biography_pb2.IdentityRegistration(
                        ori_id="moment-adaeze", identity=identity(locale="es-ES"), world_tick=0
                    )
                ]
            ),
            metadata=service,
        )
        gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        reply = await gateway.Submit(
            _submit("moment-world:700:0:dialogue", "moment-adaeze"), metadata=service
        )
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED, reply.detail
        [say] = reply.actions
        assert say.kind == action_pb2.ACTION_KIND_SAY
        payload = json_format.MessageToDict(say.payload)
        speech = payload["speech"]
        assert speech["text"].startswith("[offline] ")
        assert "the traveller" in speech["text"]
        assert {k: v for k, v in speech.items() if k != "text"} == {
            "locale": "es-ES",  # Submit left the locale empty: the Ori speaks its own
            "addressed_to": "player-1",
            "addressed_name": "the traveller",
            "heard": LINE,
            "heard_tick": 700,
            "source": "offline",
        }
        assert payload["spoken_reply"]["text"] == speech["text"]
        assert payload["model_us"] >= 0

        records = await gateway_pb2_grpc.OperatorServiceStub(channel).ListAuditRecords(
            gateway_pb2.ListAuditRecordsRequest(run_id=reply.run_id), metadata=operator
        )
        zones = [
            zone["content"]
            for r in records.records
            for zone in json_format.MessageToDict(r.input_context)["untrusted"]
        ]
        assert f"the traveller (player-1) says: {LINE}" in "\n".join(zones)
        assert any(z.startswith("name: Adaeze the smith\nvocation: smith\n") for z in zones)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("x" * 601, "candidate.moment.situation.player_line.text"),
        ("nul \x00 inside", "candidate.moment.situation.player_line.text"),
    ],
)
async def test_a_moment_past_its_limits_is_refused_naming_the_field(
    embedded_egbe: EmbeddedEgbe, text: str, field: str
) -> None:
    service = bearer_metadata(embedded_egbe.tokens["service"])
    submit = _submit("moment-world:701:0:dialogue", "moment-refused", text)
    submit.candidate.moment.situation.crossroads.options.extend(["o"] * 9)
    async with grpc.aio.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gateway_pb2_grpc.CognitionGatewayServiceStub(channel).Submit(submit, metadata=service)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    assert status is not None
    assert [v.field for v in field_violations(status)] == [
        field,
        "candidate.moment.situation.crossroads.options",
    ]
