"""The eval gate on a gateway that answers with a model: its tiers' selected classes must be qualified by
scores recorded in the store, at start and while it runs (re-recorded scores are picked up)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from gateway.config import RoutingConfig, TierRoute
from gateway.evals.scores import EvalScore
from gateway.server import build_gateway, build_store
from services.settings import UserError
from tests.gateway.harness import (
    ATROPOS,
    LACHESIS,
    gateway_settings,
    record_route_scores,
    start_gateway,
)

SUMMARY = "narrative-summary-continuity"


@pytest.fixture(autouse=True)
def a_model_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Anthropic adapter is built (never called here): the gate applies."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")


async def test_a_class_with_no_recorded_score_refuses_start_naming_the_field(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    await record_route_scores(settings)
    store = build_store(settings)
    await store.open()
    try:  # Atropos's class loses its evidence: a score for another model id only
        await store.record_eval_scores(
            [EvalScore("anthropic", "claude-haiku-4-5", SUMMARY, 0, 9_000, 24, 1, 1, False, 1)],
            operator_id="tests",
        )
    finally:
        await store.close()
    with pytest.raises(UserError) as refused:
        await build_gateway(settings)
    assert str(refused.value) == (
        "routing.atropos.selected_model_class: haiku-class has no recorded score on"
        f" {SUMMARY}; run `egbe eval --suite {SUMMARY} --class haiku-class`"
    )


async def test_a_recorded_score_below_the_bar_refuses_start(tmp_path: Path, database_url: str | None) -> None:
    routing = RoutingConfig(
        lachesis=TierRoute(
            eval_suite="offscreen-reflection-coherence",
            required_quality_bp=9_901,
            selected_model_class="sonnet-class",
        )
    )
    settings = gateway_settings(tmp_path, database_url, routing=routing)
    await record_route_scores(settings, score_bp=9_900)
    with pytest.raises(UserError) as refused:
        await build_gateway(settings)
    [line] = str(refused.value).splitlines()
    assert line.startswith(
        "routing.lachesis.selected_model_class: sonnet-class scored 9900 bp on"
        " offscreen-reflection-coherence, below the tier's 9901 bp"
    )


async def test_scores_re_recorded_while_running_are_picked_up(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url, sweep_interval_seconds=0.1)
    harness = await start_gateway(settings)
    recorder = build_store(settings)
    await recorder.open()
    try:
        await harness.admit("ada", tier=ATROPOS)
        low = EvalScore("anthropic", "claude-haiku-4-5", SUMMARY, 1, 7_000, 24, 7, 10, False, 2)
        await recorder.record_eval_scores([low], operator_id="tests")
        for _ in range(100):  # pushed (PostgreSQL) or read on the next tick (SQLite, another store)
            route = await harness.select_route(ATROPOS)
            if route.quality_bp == 7_000:
                break
            await asyncio.sleep(0.05)
        assert (route.quality_bp, route.smallest_qualified, route.evaluated) == (7_000, False, True)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await harness.admit("ada", tier=ATROPOS)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.details().startswith("routing.atropos.selected_model_class: haiku-class scored")
        await harness.admit("ada", tier=LACHESIS)  # the other tiers go on
        await recorder.record_eval_scores(
            [EvalScore(**{**vars(low), "score_bp": 8_000})], operator_id="tests"
        )
        for _ in range(100):
            if (await harness.select_route(ATROPOS)).quality_bp == 8_000:
                break
            await asyncio.sleep(0.05)
        await harness.admit("ada", tier=ATROPOS)
    finally:
        await recorder.close()
        await harness.stop()


async def test_select_model_route_says_when_no_score_applies(
    tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    harness = await start_gateway(gateway_settings(tmp_path, database_url), record_scores=False)
    try:
        route = await harness.select_route(LACHESIS)
        assert (route.evaluated, route.quality_bp, route.quality_note) == (
            False,
            0,
            "not evaluated: the offline adapter answers, and it is no model",
        )
        await harness.admit("ada", tier=LACHESIS)  # no score recorded, and the gate does not apply
    finally:
        await harness.stop()
