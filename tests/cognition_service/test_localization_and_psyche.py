"""Localization labels its source honestly; Psyche plans opus speech, visemes and the latency budget."""

from __future__ import annotations

import itertools

import pytest

from cognition_service.config import CognitionConfig
from cognition_service.localization import native_line, template_line
from cognition_service.psyche import spoken_reply_plan, viseme_track
from egbe.v1 import cognition_pb2, gateway_pb2

CONFIG = CognitionConfig()


def test_there_is_no_translation_source() -> None:
    assert set(cognition_pb2.LineSource.keys()) == {
        "LINE_SOURCE_UNSPECIFIED",
        "LINE_SOURCE_MODEL",
        "LINE_SOURCE_TEMPLATE_FALLBACK",
    }


@pytest.mark.parametrize("locale", ["en-US", "es-ES", "yo-NG"])
def test_each_locale_has_a_labelled_template(locale: str) -> None:
    line = template_line(locale, "ada", CONFIG.dialogue_templates)
    assert line.source == cognition_pb2.LINE_SOURCE_TEMPLATE_FALLBACK
    assert not line.generated_natively
    assert "ada" in line.text
    assert line.locale == locale


def test_a_model_line_is_native_and_a_blocked_verdict_withholds_it() -> None:
    response = gateway_pb2.GenerateResponse(model_ref="anthropic:x", call_id="c1", quality_status="passed")
    line = native_line("es-ES", "Buenos días, Ada.", response)
    assert (line.source, line.generated_natively, line.approved) == (
        cognition_pb2.LINE_SOURCE_MODEL,
        True,
        True,
    )
    response.quality_status = "blocked"
    assert not native_line("es-ES", "Buenos días, Ada.", response).approved


def test_the_offline_adapter_is_not_native_generation() -> None:
    line = native_line("en-US", "[offline] hi", gateway_pb2.GenerateResponse(offline=True))
    assert not line.generated_natively


def test_the_default_stage_breakdown_sums_to_646_ms_of_1000() -> None:
    plan = spoken_reply_plan("Hello there", "en-US", {}, CONFIG)
    assert (plan.codec, plan.sample_rate_hz, plan.channels) == ("opus", 48_000, 1)
    assert plan.stages_total_ms == 646
    assert plan.end_to_end_budget_ms == 1_000
    assert plan.within_budget
    assert list(plan.overran_stages) == []


def test_the_plan_names_the_stage_that_overran() -> None:
    plan = spoken_reply_plan("Hello", "en-US", {"cognition": 25, "transport": 5}, CONFIG)
    assert list(plan.overran_stages) == ["cognition"]
    assert plan.within_budget  # 15 ms over one stage still fits the 1,000 ms
    late = spoken_reply_plan("Hello", "en-US", {"model_first_token": 900}, CONFIG)
    assert list(late.overran_stages) == ["model_first_token"]
    assert not late.within_budget


def test_visemes_follow_the_text_and_tile_time() -> None:
    cues = viseme_track("Mama, bí?", 50)
    assert [c.viseme for c in cues] == ["PP", "aa", "PP", "aa", "sil", "PP", "ih", "sil"]
    assert all(b.start_ms == a.start_ms + a.duration_ms for a, b in itertools.pairwise(cues))
    assert cues[4].duration_ms == 100  # ", " is one merged silence
