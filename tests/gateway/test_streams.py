"""RunStream and AdmitStream over real gRPC: pipelined messages answered by id, refusals per message, kills
mid-stream, and every run a stream leaves open ended (its reservation released) when the stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from egbe.v1 import gateway_pb2
from gateway.streams import MAX_IN_FLIGHT, serve_stream
from services.auth import Role
from tests.gateway.fake_anthropic import SLOW_MODEL_SECONDS, FakeAnthropic
from tests.gateway.harness import (
    GatewayHarness,
    admit_request,
    anthropic_gateway,
    gateway_settings,
    run_request,
    start_gateway,
)

CLOTHO_RESERVATION = 4_000
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
ABORTED = grpc.StatusCode.ABORTED.value[0]


def run_message(message_id: int, ori: str, **fields: Any) -> gateway_pb2.RunStreamRequest:
    return gateway_pb2.RunStreamRequest(message_id=message_id, run=run_request(ori, **fields))


def admit_message(message_id: int, ori: str) -> gateway_pb2.AdmitStreamRequest:
    return gateway_pb2.AdmitStreamRequest(message_id=message_id, admit=admit_request(ori))


def end_message(message_id: int, run_id: str) -> gateway_pb2.AdmitStreamRequest:
    end = gateway_pb2.EndRunRequest(run_id=run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED)
    return gateway_pb2.AdmitStreamRequest(message_id=message_id, end=end)


async def exchange(call: Any, messages: Sequence[Any]) -> dict[int, Any]:
    """Write every message before reading any answer, close, and the answers by message id."""
    for message in messages:
        await call.write(message)
    await call.done_writing()
    answers = {}
    while (answer := await call.read()) is not grpc.aio.EOF:
        assert answer.message_id not in answers
        answers[answer.message_id] = answer
    assert await call.code() == grpc.StatusCode.OK
    return answers


async def ask(call: Any, message: Any) -> Any:
    """One message on an open stream, and its answer (nothing else is in flight on it)."""
    await call.write(message)
    answer = await call.read()
    assert answer.message_id == message.message_id
    return answer


@pytest.fixture
async def slow_model(
    tmp_path: Path, database_url: str | None, fake: FakeAnthropic
) -> AsyncIterator[GatewayHarness]:
    """A gateway whose model (the fake Anthropic API) takes SLOW_MODEL_SECONDS to answer."""
    fake.default_delay_seconds = SLOW_MODEL_SECONDS
    harness = await anthropic_gateway(tmp_path, database_url)
    yield harness
    await harness.stop()


async def run_at_the_model(harness: GatewayHarness, fake: FakeAnthropic) -> Any:
    """A RunStream whose message 1 (a run for "ada") is waiting for the model."""
    call = harness.gateway.RunStream(metadata=harness.metadata(Role.SERVICE))
    await call.write(run_message(1, "ada"))
    await fake.until_requests(1)
    return call


async def _audited_tokens(harness: GatewayHarness) -> int:
    return sum(r.usage.input_tokens + r.usage.output_tokens for r in await harness.audit_records())


async def _until_reserved_is_zero(harness: GatewayHarness) -> gateway_pb2.GetSpendResponse:
    """The spend once nothing is reserved: a cancelled stream's runs are ended after its call is gone."""
    for _ in range(500):
        spend = await harness.spend("world-1")
        if spend.reserved_tokens == 0:
            return spend
        await asyncio.sleep(0.02)
    raise AssertionError(f"{spend.reserved_tokens} tokens still reserved after the stream was cancelled")


async def test_pipelined_runs_are_answered_by_message_id(gateway: GatewayHarness) -> None:
    call = gateway.gateway.RunStream(metadata=gateway.metadata(Role.SERVICE))
    ids = [7, 3, 11, 2**63, 0, 42]
    answers = await exchange(call, [run_message(m, f"ori-{m % 5}") for m in ids])

    assert sorted(answers) == sorted(ids)
    runs = {m: a.run for m, a in answers.items()}
    assert all(not a.HasField("status") for a in answers.values())
    assert {r.outcome for r in runs.values()} == {gateway_pb2.RUN_OUTCOME_COMPLETED}
    records = await gateway.audit_records()
    assert sorted(r.run_id for r in records) == sorted(r.admission.run_id for r in runs.values())
    assert {r.call_id for r in records} == {r.generation.call_id for r in runs.values()}
    spend = await gateway.spend("world-1")
    assert (spend.reserved_tokens, spend.admissions) == (0, len(ids))
    assert spend.consumed_tokens == await _audited_tokens(gateway)


async def test_a_bad_message_is_refused_naming_its_field_and_the_stream_goes_on(
    gateway: GatewayHarness,
) -> None:
    runs = gateway.gateway.RunStream(metadata=gateway.metadata(Role.SERVICE))
    unnamed = run_message(2, "")
    answers = await exchange(runs, [run_message(1, "ada"), unnamed, run_message(3, "bram")])
    refused = answers[2].status
    assert refused.code == INVALID_ARGUMENT
    assert [v.field for v in refused.field_violations] == ["run.admit.ori.ori_id"]
    assert not answers[2].HasField("run")
    assert answers[1].run.outcome == answers[3].run.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED

    admissions = gateway.gateway.AdmitStream(metadata=gateway.metadata(Role.SERVICE))
    admitted = await ask(admissions, admit_message(1, "ada"))
    assert admitted.admit.admitted
    bad_ending = gateway_pb2.AdmitStreamRequest(
        message_id=2, end=gateway_pb2.EndRunRequest(run_id=admitted.admit.run_id)
    )
    unknown_run = end_message(4, "no-such-run")
    answers = await exchange(
        admissions, [bad_ending, gateway_pb2.AdmitStreamRequest(message_id=3), unknown_run]
    )
    assert [v.field for v in answers[2].status.field_violations] == ["end.outcome"]
    assert [v.field for v in answers[3].status.field_violations] == ["kind"]
    assert answers[4].status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert [v.field for v in answers[4].status.field_violations] == ["end.run_id"]
    # The bad ending did not end the run; the stream's end did.
    spend = await gateway.spend("world-1")
    assert spend.reserved_tokens == 0


async def test_a_message_id_already_in_flight_is_refused(
    slow_model: GatewayHarness, fake: FakeAnthropic
) -> None:
    call = await run_at_the_model(slow_model, fake)
    duplicate = await ask(call, run_message(1, "bram"))
    assert duplicate.status.code == INVALID_ARGUMENT
    assert [v.field for v in duplicate.status.field_violations] == ["message_id"]
    call.cancel()
    await _until_reserved_is_zero(slow_model)
    assert len(fake.message_requests()) == 1  # the duplicate was never run


async def test_a_kill_mid_stream_refuses_that_ori_and_serves_the_others(gateway: GatewayHarness) -> None:
    call = gateway.gateway.AdmitStream(metadata=gateway.metadata(Role.SERVICE))
    first = await ask(call, admit_message(1, "ada"))
    assert first.admit.admitted
    killed = await gateway.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada", reason="runaway"), metadata=gateway.metadata_operator()
    )
    assert killed.runs_aborted == 1
    refused = await ask(call, admit_message(2, "ada"))
    assert refused.status.code == ABORTED
    assert refused.status.metadata["control_id"] == killed.control.control_id
    assert "runaway" in refused.status.message
    other = await ask(call, admit_message(3, "bram"))
    assert other.admit.admitted
    ended = await ask(call, end_message(4, other.admit.run_id))
    assert ended.end.ended_now
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    assert (await gateway.spend("world-1")).reserved_tokens == 0


async def test_a_kill_stops_a_run_in_flight_on_the_stream(
    slow_model: GatewayHarness, fake: FakeAnthropic
) -> None:
    call = await run_at_the_model(slow_model, fake)
    await slow_model.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="ada", reason="stop now"), metadata=slow_model.metadata_operator()
    )
    stopped = await asyncio.wait_for(call.read(), 5.0)
    assert (stopped.message_id, stopped.status.code) == (1, ABORTED)
    fake.default_delay_seconds = 0.0
    served = await ask(call, run_message(2, "bram"))
    assert served.run.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK

    [killed] = await slow_model.audit_records(ori_id="ada")
    assert killed.error_class == "killed"
    spend = await slow_model.spend("world-1")
    assert spend.reserved_tokens == 0
    assert spend.consumed_tokens == await _audited_tokens(slow_model)


async def test_cancelling_an_admit_stream_ends_its_open_runs(gateway: GatewayHarness) -> None:
    call = gateway.gateway.AdmitStream(metadata=gateway.metadata(Role.SERVICE))
    admitted = [await ask(call, admit_message(n, f"ori-{n}")) for n in range(5)]
    await ask(call, end_message(5, admitted[0].admit.run_id))
    assert (await gateway.spend("world-1")).reserved_tokens == 4 * CLOTHO_RESERVATION
    call.cancel()

    await _until_reserved_is_zero(gateway)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await gateway.generate(admitted[1].admit.run_id)
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_closing_an_admit_stream_ends_its_open_runs_before_the_call_ends(
    gateway: GatewayHarness,
) -> None:
    call = gateway.gateway.AdmitStream(metadata=gateway.metadata(Role.SERVICE))
    answers = await exchange(call, [admit_message(n, f"ori-{n}") for n in range(8)])
    assert all(a.admit.admitted for a in answers.values())
    # The call's status came after the stream's runs were ended.
    assert (await gateway.spend("world-1")).reserved_tokens == 0


async def test_cancelling_a_run_stream_cancels_its_run_in_flight(
    slow_model: GatewayHarness, fake: FakeAnthropic
) -> None:
    call = await run_at_the_model(slow_model, fake)
    call.cancel()
    spend = await _until_reserved_is_zero(slow_model)
    [cancelled] = await slow_model.audit_records()
    assert cancelled.error_class == "cancelled"
    assert spend.consumed_tokens == await _audited_tokens(slow_model)


async def test_a_stream_is_authorized_once_when_it_opens(gateway: GatewayHarness) -> None:
    call = gateway.gateway.RunStream(metadata=gateway.metadata(Role.WORLD))
    assert await call.code() == grpc.StatusCode.PERMISSION_DENIED  # refused before reading a message
    assert await gateway.audit_records() == []


@pytest.fixture
async def capped(tmp_path: Path, database_url: str | None) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(tmp_path, database_url)
    budget = settings.gateway.budget.model_copy(update={"world_cap_tokens_per_hour": 5 * CLOTHO_RESERVATION})
    harness = await start_gateway(
        settings.model_copy(update={"gateway": settings.gateway.model_copy(update={"budget": budget})})
    )
    yield harness
    await harness.stop()


STREAMS = 12
PER_STREAM = 8


async def test_many_admit_streams_never_reserve_past_the_cap(capped: GatewayHarness) -> None:
    async def admit_all(stream: int) -> tuple[Any, dict[int, Any]]:
        call = capped.gateway.AdmitStream(metadata=capped.metadata(Role.SERVICE))
        for n in range(PER_STREAM):
            await call.write(admit_message(n, f"ori-{stream}-{n}"))
        return call, {a.message_id: a for a in [await call.read() for _ in range(PER_STREAM)]}

    streams = await asyncio.gather(*(admit_all(s) for s in range(STREAMS)))
    admitted = [a.admit for _, answers in streams for a in answers.values() if a.admit.admitted]
    assert len(admitted) == 5  # the cap is filled exactly, never passed
    spend = await capped.spend("world-1")
    assert spend.reserved_tokens == sum(a.reserved_tokens for a in admitted) == 5 * CLOTHO_RESERVATION
    assert spend.blocked_by_world_cap == STREAMS * PER_STREAM - 5
    for call, _ in streams:
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK
    assert (await capped.spend("world-1")).reserved_tokens == 0


async def test_many_run_streams_leave_the_ledger_equal_to_the_audit_log(capped: GatewayHarness) -> None:
    async def run_all(stream: int) -> dict[int, Any]:
        call = capped.gateway.RunStream(metadata=capped.metadata(Role.SERVICE))
        return await exchange(call, [run_message(n, f"ori-{stream}-{n}") for n in range(PER_STREAM)])

    answers = [a for s in await asyncio.gather(*(run_all(s) for s in range(STREAMS))) for a in s.values()]
    completed = [a.run for a in answers if a.run.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED]
    deferred = [a.run for a in answers if a.run.outcome == gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP]
    assert len(completed) + len(deferred) == STREAMS * PER_STREAM
    assert completed
    spend = await capped.spend("world-1")
    assert spend.reserved_tokens == 0
    assert spend.consumed_tokens == await _audited_tokens(capped) <= 5 * CLOTHO_RESERVATION
    assert spend.consumed_tokens == sum(r.ending.used_tokens for r in completed)
    assert spend.blocked_by_world_cap == len(deferred)


async def test_a_stream_serves_at_most_max_in_flight_messages_at_once() -> None:
    """`serve_stream` on its own: past MAX_IN_FLIGHT it stops reading until an answer frees a slot."""
    total = MAX_IN_FLIGHT + 10
    read, started = 0, 0
    release, all_slots_taken = asyncio.Event(), asyncio.Event()

    async def requests() -> AsyncIterator[gateway_pb2.RunStreamRequest]:
        nonlocal read
        for n in range(total):
            read += 1
            yield gateway_pb2.RunStreamRequest(message_id=n)

    async def answer(request: gateway_pb2.RunStreamRequest) -> gateway_pb2.RunStreamResponse:
        nonlocal started
        started += 1
        if started == MAX_IN_FLIGHT:
            all_slots_taken.set()
        await release.wait()
        return gateway_pb2.RunStreamResponse(message_id=request.message_id)

    answers = serve_stream(requests(), answer, gateway_pb2.RunStreamResponse, cancel_in_flight=True)
    first = asyncio.ensure_future(anext(answers))
    await all_slots_taken.wait()
    for _ in range(100):  # nothing else can run until an answer frees a slot
        await asyncio.sleep(0)
    assert (started, read) == (MAX_IN_FLIGHT, MAX_IN_FLIGHT + 1)  # one read, waiting for a slot
    release.set()
    served = [await first] + [a async for a in answers]
    assert sorted(a.message_id for a in served) == list(range(total))
    assert not any(a.HasField("status") for a in served)
