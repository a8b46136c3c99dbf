"""Psyche's spoken reply: the TTS plan, a viseme track from the text, and the end-to-end latency budget."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from itertools import groupby

from cognition_service.config import CognitionConfig
from egbe.v1 import cognition_pb2

SILENCE = "sil"
# Letter → viseme class (the 15-viseme set lip-sync engines share); digraphs are checked first.
DIGRAPHS = {"ch": "CH", "sh": "CH", "th": "TH", "gb": "PP", "kp": "PP"}
LETTERS = {
    **dict.fromkeys("pbm", "PP"),
    **dict.fromkeys("fv", "FF"),
    **dict.fromkeys("td", "DD"),
    **dict.fromkeys("kgqcx", "kk"),
    **dict.fromkeys("jy", "CH"),
    **dict.fromkeys("sz", "SS"),
    **dict.fromkeys("nl", "nn"),
    "r": "RR",
    "a": "aa",
    "e": "E",
    "i": "ih",
    "o": "oh",
    "u": "ou",
    "w": "ou",
    "h": "aa",
}


def _letters(text: str) -> str:
    # Accents and tone marks (é, ọ́, ṣ) change pitch and quality, not the mouth shape we draw.
    decomposed = unicodedata.normalize("NFD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def viseme_track(text: str, ms_per_char: int) -> list[cognition_pb2.VisemeCue]:
    """One cue per mouth shape, repeated shapes merged, silences at spaces and punctuation."""
    letters = _letters(text)
    shapes: list[str] = []
    i = 0
    while i < len(letters):
        pair = letters[i : i + 2]
        if pair in DIGRAPHS:
            shapes.append(DIGRAPHS[pair])
            i += 2
            continue
        shapes.append(LETTERS.get(letters[i], SILENCE))
        i += 1
    cues = []
    start = 0
    for shape, repeated in groupby(shapes):
        duration = len(list(repeated)) * ms_per_char
        cues.append(cognition_pb2.VisemeCue(viseme=shape, start_ms=start, duration_ms=duration))
        start += duration
    return cues


def spoken_reply_plan(
    text: str, locale: str, measured_ms: Mapping[str, int], config: CognitionConfig
) -> cognition_pb2.SpokenReplyPlan:
    """The plan for speaking a line, with each stage's budget, what it measured and whether it overran."""
    unknown = set(measured_ms) - set(config.spoken_reply_stages_ms)
    if unknown:
        raise ValueError(f"unknown spoken-reply stages {sorted(unknown)}")
    stages = [
        cognition_pb2.LatencyStage(
            stage=name,
            budget_ms=budget,
            measured_ms=measured_ms.get(name, 0),
            overran=measured_ms.get(name, 0) > budget,
        )
        for name, budget in config.spoken_reply_stages_ms.items()
    ]
    measured_total = sum(max(s.measured_ms, s.budget_ms) for s in stages)
    return cognition_pb2.SpokenReplyPlan(
        codec=config.tts_codec,
        sample_rate_hz=config.tts_sample_rate_hz,
        channels=config.tts_channels,
        text=text,
        locale=locale,
        visemes=viseme_track(text, config.viseme_ms_per_char),
        end_to_end_budget_ms=config.spoken_reply_budget_ms,
        stages=stages,
        stages_total_ms=sum(config.spoken_reply_stages_ms.values()),
        overran_stages=[s.stage for s in stages if s.overran],
        within_budget=measured_total <= config.spoken_reply_budget_ms,
    )
