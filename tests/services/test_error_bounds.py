"""A refusal stays small enough to reach the client whatever the request echoes into it."""

from __future__ import annotations

from services.errors import (
    MAX_DESCRIPTION_BYTES,
    MAX_FIELD_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_VIOLATIONS,
    FieldViolation,
    InvalidArgument,
    to_rpc_status,
)


def test_a_refusal_echoing_a_huge_request_is_clipped_to_the_trailer_budget() -> None:
    violations = [FieldViolation(f"snapshot.arrays.{'é' * 2_000}{i}", "x" * 70_000) for i in range(300)]
    status = to_rpc_status(InvalidArgument(violations))
    assert MAX_MESSAGE_BYTES - 2 <= len(status.message.encode()) <= MAX_MESSAGE_BYTES  # a cut 'é'
    assert status.message.endswith("…")
    error = InvalidArgument(violations)
    assert len(error.violations) == MAX_VIOLATIONS
    assert {len(v.field.encode()) for v in error.violations} == {MAX_FIELD_BYTES - 1}  # a cut 'é'
    assert {len(v.description.encode()) for v in error.violations} == {MAX_DESCRIPTION_BYTES}
    assert len(status.SerializeToString()) < 8 * 1024


def test_an_ordinary_refusal_is_unchanged() -> None:
    error = InvalidArgument.field("batch.tick", "goes backwards")
    assert error.message == "invalid argument: batch.tick: goes backwards"
    assert error.violations == [FieldViolation("batch.tick", "goes backwards")]
