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
    assert "tick 40 · reflected: The forge was busy." in html
    assert "matches" in html
    assert "59x fewer" in html


def test_a_model_run_and_a_divergent_replay_say_so() -> None:
    artifact = recorded_artifact()
    artifact.answered_by = "model"
    artifact.outcomes.answered_by_model, artifact.outcomes.answered_offline = 80, 0
    artifact.replay.matches = False
    artifact.replay.divergence = "ticks[3].report.clotho_count"
    artifact.replay.recorded, artifact.replay.fresh = "2", "3"
    html = render_report(artifact)
    assert html.split("<body>", 1)[1].startswith('<p class="banner model">MODEL: a model answered 80 of 80')
    assert "ticks[3].report.clotho_count" in html


def test_conversations_moments_and_timelines_are_told() -> None:
    html = render_report(recorded_artifact())
    story = html.split('<h2 id="conversations">Conversations</h2>', 1)[1]
    assert story.startswith("<p>The player spoke 2 times: 1 of 2 answered, reply p50 1 ticks, 12.5 ms.</p>")
    answered, unanswered = story.split('<div class="card conversation">')[1:3]
    assert "tick 70 · the player to Adaeze the smith" in answered
    assert "Adaeze, can the new plough share be ready by the harvest?" in answered
    assert "<b>Adaeze the smith:</b> By harvest, if Kunle keeps the bellows going." in answered
    assert "reply at tick 71: 1 ticks, 12.5 ms · tier clotho · offline adapter" in answered
    assert "spoken-reply plan within its 1,500 ms budget" in answered
    assert "Folasade, who should carry bread to the ferry today?" in unanswered
    assert '<span class="bad">no reply</span> by the end of the run' in unanswered
    moments = html.split('<h2 id="moments">What the crossroads and the irreversible actions came to</h2>', 1)[
        1
    ]
    assert "<b>Crossroads</b> for Kunle, ticks 90–289" in moments
    assert "tick 91 · decision (offline): stay at the forge" in moments
    assert '<span class="ok">chose: stay at the forge</span>' in moments
    assert "No cognition result reached the world for Ireti the miller in this window." in moments
    lives = html.split('<h2 id="lives">Featured lives, as their biographies tell them</h2>', 1)[1]
    adaeze = lives.split('<ol class="timeline">', 1)[1].split("</ol>", 1)[0]
    assert adaeze == (
        "<li>tick 0 · identity registered: Adaeze the smith, smith, home The cottages"
        " (identity version 1)</li>"
        "<li>tick 40 · reflected: The forge was busy.</li>"
        "<li>tick 300 · memory formed</li>"
    )
    assert "No biography events were recorded for this Ori in this run." in lives  # Kunle
