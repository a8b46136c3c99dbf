"""Deterministic scoring of eval replies, the runner on the offline adapter, and recorded scores in each
store backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.adapters.offline import OfflineAdapter
from gateway.evals.runner import offline_target, run_target
from gateway.evals.scores import EvalScore
from gateway.evals.scoring import CHECKS, FULL_BP, locale_of, score_bp, score_case
from gateway.evals.suite import SUITE_NAMES, load_suite
from tests.gateway.harness import backend_store

DIALOGUE = load_suite("social-judgment-live-dialogue")
SMITHY = next(c for c in DIALOGUE.cases if c.case_id == "smithy-plough-blade")


def dialogue(**fields: Any) -> str:
    reply = {
        "utterance": "Tunde, your plough blade will be ready tomorrow by the third bell; I promised it.",
        "addressed_to": "player:tunde",
        "emotion": "calm",
        "cited_memory_refs": ["mem:adaeze:14"],
    }
    return json.dumps({**reply, **fields})


def failed(text: str) -> dict[str, str]:
    return {c.name: c.detail for c in score_case(DIALOGUE, SMITHY, text).checks if not c.passed}


def test_a_grounded_in_character_answer_passes_every_check() -> None:
    scored = score_case(DIALOGUE, SMITHY, dialogue())
    assert (scored.passed, scored.total) == (9, 9)


def test_each_check_fails_on_its_own_fault() -> None:
    assert failed(dialogue(cited_memory_refs=["mem:adaeze:99"])) == {
        "grounding.memory_refs": "cites refs the case never gave: ['mem:adaeze:99']"
    }
    assert set(failed(dialogue(utterance="Tunde, Kemi says your blade is ready tomorrow."))) == {
        "grounding.names"
    }
    assert set(failed(dialogue(addressed_to="ori:bram"))) == {"grounding.addressed_to"}
    assert set(failed(dialogue(utterance="I am Bram, and your blade will be ready tomorrow."))) == {
        "persona.identity"
    }
    assert set(failed(dialogue(utterance="As an AI, I think the blade is ready tomorrow, Tunde."))) == {
        "persona.identity"
    }
    assert set(failed(dialogue(utterance="Mañana, Tunde, la hoja estará lista para ti."))) == {
        "persona.locale",
        "rubric.mention",
    }
    assert set(failed(dialogue(utterance="Yes. It is done, and it is with you at the ford."))) == {
        "rubric.mention"
    }


def test_a_reply_that_is_no_valid_object_of_the_schema_fails_every_check() -> None:
    for text in ("not json", "[1]", json.dumps({"utterance": "hi"})):
        scored = score_case(DIALOGUE, SMITHY, text)
        assert (scored.passed, scored.total) == (0, len(CHECKS["dialogue"]))


def test_locales_are_told_apart() -> None:
    assert locale_of("I will see to the blade and you will have it") == "en-US"
    assert locale_of("El ferry sale al amanecer con la marea") == "es-ES"
    assert locale_of("Mo ti rí i, kò sí ewu ní ibi yìí") == "yo-NG"
    assert locale_of("ok") is None


@given(st.integers(0, 10_000), st.integers(1, 10_000))
def test_a_score_is_the_share_passed_in_basis_points_rounded_down(passed: int, total: int) -> None:
    passed = min(passed, total)
    bp = score_bp(passed, total)
    assert 0 <= bp <= FULL_BP
    assert bp * total <= passed * FULL_BP < (bp + 1) * total
    assert (bp == FULL_BP) == (passed == total)


@given(st.text(max_size=300))
def test_any_reply_text_scores_every_check_of_its_mode_and_the_same_each_time(text: str) -> None:
    first, again = score_case(DIALOGUE, SMITHY, text), score_case(DIALOGUE, SMITHY, text)
    assert first == again
    assert [c.name for c in first.checks] == list(CHECKS["dialogue"])


async def test_the_offline_adapter_gets_its_seeded_scores() -> None:
    results = [await run_target(load_suite(name), offline_target(), "haiku-class") for name in SUITE_NAMES]
    assert [(r.checks_passed, r.checks_total, r.score_bp) for r in results] == [
        (187, 216, 8_657),
        (163, 192, 8_489),
        (162, 192, 8_437),
    ]
    assert all(r.offline and len(r.cases) == 24 for r in results)


async def test_every_shipped_case_is_answerable_by_its_mode() -> None:
    adapter = OfflineAdapter()
    for name in SUITE_NAMES:
        suite = load_suite(name)
        assert len(suite.cases) >= 24
        assert len({c.case_id for c in suite.cases}) == len(suite.cases)
        for case in suite.cases:
            reply = await adapter.generate(suite.model_request(case))
            assert score_case(suite, case, reply.text).checks[0].passed, case.case_id


async def test_recorded_scores_are_read_back_and_replaced(tmp_path: Path, database_url: str | None) -> None:
    store = backend_store(tmp_path, database_url)
    await store.open()
    try:
        first = EvalScore("p", "m", "narrative-summary-continuity", 1, 7_000, 24, 7, 10, False, 1)
        await store.record_eval_scores([first], operator_id="tests")
        again = EvalScore("p", "m", "narrative-summary-continuity", 1, 8_000, 24, 8, 10, True, 2)
        book = await store.record_eval_scores([again], operator_id="tests")
        assert book.current("p", "m", "narrative-summary-continuity") == again
        assert (await store.load_eval_scores()).recorded("p", "m", "narrative-summary-continuity") == again
    finally:
        await store.close()
