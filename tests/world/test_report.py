"""report.html from a recorded artifact: self-contained, offline on its first line, charts not tables."""

from __future__ import annotations

import re

from tests.world.recorded_run import recorded_artifact
from world.report import render_report


def test_first_line_says_offline_and_the_page_is_self_contained() -> None:
    html = render_report(recorded_artifact())
    body = html.split("<body>", 1)[1]
    assert body.startswith('<p class="banner offline">OFFLINE')
    assert not re.search(r"""(src|href)=["']?https?:""", html)
    assert "<table" not in html


def test_every_section_a_producer_reads_is_drawn() -> None:
    html = render_report(recorded_artifact())
    for caption in (
        "Ori per cognition tier, tick by tick",
        "against the world cap",
        "Cognition calls the kernel issued, by cause, per tier",
        "every-agent-every-tick",
        "Featured Ori: biography events over the run",
        "Steward directives: allowed and refused",
    ):
        assert caption in html
    assert html.count('<svg class="chart"') == 7
    assert "Erase Ireti&#x27;s memory of the quarrel." in html
    assert "[offline] The forge was busy." in html
    assert "matches" in html
    assert "59x fewer" in html


def test_a_model_run_and_a_divergent_replay_say_so() -> None:
    artifact = recorded_artifact()
    artifact.answered_by = "model"
    artifact.replay.matches = False
    artifact.replay.divergence = "ticks[3].report.clotho_count"
    artifact.replay.recorded, artifact.replay.fresh = "2", "3"
    html = render_report(artifact)
    assert html.split("<body>", 1)[1].startswith('<p class="banner model">MODEL')
    assert "ticks[3].report.clotho_count" in html
