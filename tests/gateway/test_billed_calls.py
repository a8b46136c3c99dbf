"""Calls the Anthropic adapter answered (the real SDK over real HTTP to the local fake), billed by the
gateway from their usage and the price table: a deferrable Atropos call through Message Batches at the
batch share, a live Clotho call through the Messages API at the full price."""

from __future__ import annotations

from pathlib import Path

from gateway.config import AnthropicConfig
from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.harness import ATROPOS, CLOTHO, gateway_settings, start_gateway

# The fake's usage: 120 input and 40 output tokens. Per MTok: haiku $1 in / $5 out, opus $5 / $25.
HAIKU_MICRO_USD = 120 * 1 + 40 * 5
OPUS_MICRO_USD = 120 * 5 + 40 * 25


async def test_atropos_work_goes_through_batches_at_half_price_and_live_work_does_not(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> None:
    anthropic = AnthropicConfig(batches_enabled=True, batch_poll_seconds=0.01)
    harness = await start_gateway(gateway_settings(tmp_path, database_url, anthropic=anthropic))
    try:
        distant = await harness.run("ada", tier=ATROPOS)
        posted_after_distant = [path for method, path, _ in fake.requests if method == "POST"]
        live = await harness.run("bram", tier=CLOTHO)
        [distant_record] = await harness.audit_records(run_id=distant.admission.run_id)
        [live_record] = await harness.audit_records(run_id=live.admission.run_id)
    finally:
        await harness.stop()
    assert "/v1/messages/batches" in posted_after_distant
    assert "/v1/messages" not in posted_after_distant
    assert len(fake.message_requests()) == 1  # the Clotho call, live
    for reply, record, micro_usd in (
        (distant, distant_record, HAIKU_MICRO_USD // 2),
        (live, live_record, OPUS_MICRO_USD),
    ):
        assert not reply.generation.offline
        assert not reply.generation.cost.estimated
        assert reply.generation.cost.micro_usd == micro_usd
        assert (record.cost.micro_usd, record.cost.estimated) == (micro_usd, False)
    assert distant_record.model_class == "haiku-class"
    assert live_record.model_class == "opus-class"
