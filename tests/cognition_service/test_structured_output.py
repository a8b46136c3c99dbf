"""Validated output: extraction, retry with the error appended, fallback after two retries, loud failures."""

from __future__ import annotations

import pytest

from cognition_service.errors import EmptyReply
from cognition_service.output_schemas import DialogueReply
from cognition_service.structured_output import ReplyInvalid, extract_json, generate_validated, parse_reply
from cognition_service.zoning import Feedback
from egbe.v1 import gateway_pb2
from services.errors import Unavailable

from .doubles import ScriptedGateway, dialogue, outage


def _request(attempt: int, feedback: Feedback | None) -> gateway_pb2.GenerateRequest:
    untrusted = []
    if feedback is not None:
        untrusted = [
            gateway_pb2.UntrustedZone(
                kind=gateway_pb2.UNTRUSTED_ZONE_KIND_PRIOR_MODEL_OUTPUT, content=feedback.prior_output
            ),
            gateway_pb2.UntrustedZone(
                kind=gateway_pb2.UNTRUSTED_ZONE_KIND_REVIEWER_CRITIQUE, content=feedback.critique
            ),
        ]
    return gateway_pb2.GenerateRequest(
        attempt=attempt, prompt=gateway_pb2.PromptEnvelope(untrusted=untrusted)
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',
        'Sure! ```json\n{"a": 1}\n``` hope that helps',
        '<thinking>maybe {"b": 2}</thinking> here: {"a": 1}',
        'preamble {"a": 1} trailer',
    ],
)
def test_extract_json_finds_the_object(text: str) -> None:
    assert extract_json(text) == '{"a": 1}'


def test_parse_reply_fails_loud_on_empty_text_or_a_blank_utterance() -> None:
    with pytest.raises(EmptyReply):
        parse_reply("   ", DialogueReply)
    with pytest.raises(EmptyReply):
        parse_reply(dialogue(utterance="  "), DialogueReply)
    with pytest.raises(ReplyInvalid, match="addressed_to"):
        parse_reply('{"utterance": "hi", "emotion": "calm"}', DialogueReply)


async def test_a_reply_fixed_on_retry_carries_the_validation_error_back() -> None:
    gateway = ScriptedGateway(['{"utterance": "hi"}', dialogue()])
    outcome = await generate_validated(gateway, _request, DialogueReply, max_retries=2, calls_allowed=6)
    assert isinstance(outcome.reply, DialogueReply)
    assert [r.attempt for r in gateway.requests] == [1, 2]
    critique = gateway.requests[1].prompt.untrusted[1]
    assert critique.kind == gateway_pb2.UNTRUSTED_ZONE_KIND_REVIEWER_CRITIQUE
    assert "addressed_to" in critique.content
    assert gateway.requests[1].prompt.untrusted[0].content == '{"utterance": "hi"}'


async def test_two_failed_retries_fall_back_after_three_calls() -> None:
    gateway = ScriptedGateway(["not json at all"])
    outcome = await generate_validated(gateway, _request, DialogueReply, max_retries=2, calls_allowed=6)
    assert outcome.validation_fallback
    assert len(gateway.requests) == 3
    assert all(a.error for a in outcome.attempts)


async def test_the_run_budget_caps_the_retries() -> None:
    gateway = ScriptedGateway(["nope"])
    outcome = await generate_validated(gateway, _request, DialogueReply, max_retries=2, calls_allowed=2)
    assert outcome.validation_fallback
    assert len(gateway.requests) == 2


async def test_a_gateway_error_propagates() -> None:
    gateway = ScriptedGateway([outage()])
    with pytest.raises(Unavailable):
        await generate_validated(gateway, _request, DialogueReply, max_retries=2, calls_allowed=6)
