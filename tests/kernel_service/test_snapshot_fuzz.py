"""The snapshot fuzz, seeded and bounded: valid restored states keep the C and numpy cores in step,
and every broken snapshot is refused by both without changing either."""

from __future__ import annotations

from tests.kernel_service.snapshot_fuzz import run


def test_snapshot_fuzz_finds_no_half_restore_and_no_core_disagreement() -> None:
    report = run(seed=20_260_31, seconds=25.0, max_cases=160)
    assert report.failures == []
    assert report.cases == report.accepted + report.refused
    assert report.accepted >= 10
    assert report.refused >= 10
