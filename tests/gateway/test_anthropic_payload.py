"""What reaches the provider, read at the fake Messages API through a real gateway: the system blocks
(the policy and the tool grants, nothing else), the user turn with every zone of a retry, and the
output bound the run granted (what the run has left, not what the call asked for)."""

from __future__ import annotations

from pathlib import Path

from egbe.v1 import gateway_pb2
from services.auth import Role
from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.harness import anthropic_gateway

POLICY = "You are Ada, a baker. Stay in character."
GRANTS = ("biography.recall", "policy.ground")
ZONES = (
    (gateway_pb2.UNTRUSTED_ZONE_KIND_STEWARD_INPUT, "STEWARD_INPUT", "Bram: could you lend me flour?"),
    (gateway_pb2.UNTRUSTED_ZONE_KIND_PRIOR_MODEL_OUTPUT, "PRIOR_MODEL_OUTPUT", '{"utterance":"no"}'),
    (gateway_pb2.UNTRUSTED_ZONE_KIND_REVIEWER_CRITIQUE, "REVIEWER_CRITIQUE", "addressed_to must be bram"),
)


def _retry(run_id: str, max_output_tokens: int) -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(
        run_id=run_id,
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
        prompt=gateway_pb2.PromptEnvelope(
            system_policy=POLICY,
            task_instruction="Answer the line you heard.",
            tool_grants=GRANTS,
            untrusted=[gateway_pb2.UntrustedZone(kind=kind, content=text) for kind, _, text in ZONES],
        ),
        max_output_tokens=max_output_tokens,
        attempt=2,
    )


async def test_the_provider_gets_the_policy_grants_retry_zones_and_the_granted_output(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    harness = await anthropic_gateway(tmp_path, database_url)
    try:
        run = await harness.admit("ada")  # Clotho: 4,000 tokens
        metadata = harness.metadata(Role.SERVICE)
        await harness.gateway.Generate(_retry(run.run_id, 300), metadata=metadata)
        # The mode's own maximum (0: the run's 4,000) is more than the run has left after one call.
        await harness.gateway.Generate(_retry(run.run_id, 0), metadata=metadata)
        first, second = fake.message_requests()
        assert first["system"] == [
            {"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Tools granted:\nbiography.recall\npolicy.ground"},
        ]
        zones = "\n\n".join(f'<untrusted kind="{name}">\n{text}\n</untrusted>' for _, name, text in ZONES)
        assert first["messages"] == [{"role": "user", "content": f"Answer the line you heard.\n\n{zones}"}]
        assert second["system"] == first["system"]
        assert second["messages"] == first["messages"]
        assert first["max_tokens"] == 300
        # counted input 321 (the fake's count_tokens); the first call used 120 + 40
        assert second["max_tokens"] == 4_000 - (120 + 40) - 321
    finally:
        await harness.stop()
