"""Submit end to end on `egbe up`: admit, Think, Generate called back, reconcile; repeats answer the first."""

from __future__ import annotations

import grpc
import pytest

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from tests.conftest import EmbeddedEgbe, dialogue_submit


@pytest.mark.usefixtures("inside_one_ledger_window")  # it compares the ledger with the audit log
async def test_submit_runs_the_pipeline_through_generate_and_releases(embedded_egbe: EmbeddedEgbe) -> None:
    service = bearer_metadata(embedded_egbe.tokens["service"])
    operator = bearer_metadata(embedded_egbe.tokens["operator"])
    submit = dialogue_submit("submit-world:1:0:dialogue", "submit-ada", "submit-world")
    async with grpc.aio.insecure_channel(embedded_egbe.targets["gateway"]) as channel:
        gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        reply = await gateway.Submit(submit, metadata=service)
        # The offline reply is a function of the prompt: it validates and the gate approves it at once.
        assert reply.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED, reply.detail
        assert reply.policy_decision == "approved"
        assert len(reply.committed_event_ids) == 1
        assert reply.offline
        assert reply.model_ref == "offline:deterministic-v1"  # never the model the adapter stands in for
        assert reply.usage.input_tokens > 0
        repeat = await gateway.Submit(submit, metadata=service)
        assert repeat == reply  # a repeated request id answers the first run's result

        ops = gateway_pb2_grpc.OperatorServiceStub(channel)
        records = await ops.ListAuditRecords(
            gateway_pb2.ListAuditRecordsRequest(run_id=reply.run_id), metadata=operator
        )
        (record,) = records.records  # one model call: the first reply was approved
        assert record.offline
        assert record.usage == reply.usage
        # The record names the kernel's cognition call, and that id finds it.
        assert record.kernel_call_id == "submit-world:1:0:dialogue"
        by_call = await ops.ListAuditRecords(
            gateway_pb2.ListAuditRecordsRequest(kernel_call_id="submit-world:1:0:dialogue"), metadata=operator
        )
        assert [r.call_id for r in by_call.records] == [record.call_id]
        spend = await ops.GetSpend(gateway_pb2.GetSpendRequest(world_id="submit-world"), metadata=operator)
        assert spend.reserved_tokens == 0
        assert spend.consumed_tokens == record.usage.input_tokens + record.usage.output_tokens
