"""Emotion: recent episodes and need pressure folded into valence/arousal and a named, legible emotion."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.vocabulary import Emotion

BP = 10_000


@dataclass(frozen=True)
class EmotionStyle:
    dialogue_style: str
    animation_tag: str


EMOTION_STYLES: dict[Emotion, EmotionStyle] = {
    Emotion.CALM: EmotionStyle("even", "idle_relaxed"),
    Emotion.CONTENT: EmotionStyle("warm", "idle_smile"),
    Emotion.DETERMINED: EmotionStyle("clipped", "stride_purposeful"),
    Emotion.TIRED: EmotionStyle("slow", "shoulders_slumped"),
    Emotion.LONELY: EmotionStyle("wistful", "glance_around"),
    Emotion.ANXIOUS: EmotionStyle("hurried", "fidget"),
    Emotion.GRIEVING: EmotionStyle("quiet", "head_bowed"),
}


@dataclass(frozen=True)
class EmotionalEpisode:
    """Something that happened to the Ori: valence -10000..10000, arousal 0..10000, a loss or not."""

    valence_bp: int
    arousal_bp: int
    loss: bool = False


@dataclass(frozen=True)
class Mood:
    """What recent episodes left behind; decays toward neutral on every decision."""

    valence_bp: int = 0
    arousal_bp: int = 0
    grief_bp: int = 0

    def fold(self, episode: EmotionalEpisode) -> Mood:
        return Mood(
            valence_bp=_clamp((self.valence_bp + episode.valence_bp) // 2, -BP, BP),
            arousal_bp=_clamp(max(self.arousal_bp, episode.arousal_bp), 0, BP),
            grief_bp=max(self.grief_bp, _clamp(-episode.valence_bp, 0, BP))
            if episode.loss
            else self.grief_bp,
        )

    def decayed(self, shift: int) -> Mood:
        return Mood(
            self.valence_bp - (self.valence_bp >> shift),
            self.arousal_bp - (self.arousal_bp >> shift),
            self.grief_bp - (self.grief_bp >> shift),
        )


@dataclass(frozen=True)
class EmotionState:
    valence_bp: int
    arousal_bp: int
    emotion: Emotion
    dialogue_style: str
    animation_tag: str
    hard_objective_bp: int


def _clamp(x: int, low: int, high: int) -> int:
    return max(low, min(high, x))


def hard_objective_multiplier(emotion: Emotion, config: BehaviorConfig) -> int:
    if emotion == Emotion.GRIEVING:
        return config.grieving_hard_objective_bp
    if emotion == Emotion.ANXIOUS:
        return config.anxious_hard_objective_bp
    return BP


def evaluate_emotion(
    mood: Mood, needs: tuple[int, int, int, int], fatigue_bp: int, config: BehaviorConfig
) -> EmotionState:
    """Scalar reference. Pressing needs pull valence down; a safety need or a shock raises arousal."""
    valence = _clamp(mood.valence_bp + BP // 4 - max(needs) // 2, -BP, BP)
    arousal = _clamp(max(mood.arousal_bp, needs[0]) - fatigue_bp // 2, 0, BP)
    if mood.grief_bp >= config.grief_bp:
        emotion = Emotion.GRIEVING
    elif arousal >= config.aroused_bp and valence < 0:
        emotion = Emotion.ANXIOUS
    elif fatigue_bp >= config.tired_fatigue_bp:
        emotion = Emotion.TIRED
    elif needs[2] >= config.lonely_need_bp and valence < 0:
        emotion = Emotion.LONELY
    elif arousal >= config.aroused_bp:
        emotion = Emotion.DETERMINED
    elif valence >= config.content_valence_bp:
        emotion = Emotion.CONTENT
    else:
        emotion = Emotion.CALM
    style = EMOTION_STYLES[emotion]
    return EmotionState(
        valence,
        arousal,
        emotion,
        style.dialogue_style,
        style.animation_tag,
        hard_objective_multiplier(emotion, config),
    )


@dataclass(frozen=True)
class EmotionRows:
    emotion: NDArray[np.uint8]
    hard_objective_bp: NDArray[np.int32]


@dataclass(frozen=True)
class MoodRows:
    valence_bp: NDArray[np.int32]
    arousal_bp: NDArray[np.int32]
    grief_bp: NDArray[np.int32]


def evaluate_emotions(
    mood: MoodRows,
    needs: NDArray[np.uint16],
    fatigue_bp: NDArray[np.uint16],
    config: BehaviorConfig,
) -> EmotionRows:
    """Vectorized `evaluate_emotion`; `needs` is (n, 4) in Need order."""
    pressure = needs.max(axis=1).astype(np.int32)
    fatigue = fatigue_bp.astype(np.int32)
    # 64-bit, as the C step: a mood at the int32 extremes (a restored one) must not wrap.
    valence = np.clip(mood.valence_bp.astype(np.int64) + BP // 4 - pressure // 2, -BP, BP)
    arousal = np.clip(np.maximum(mood.arousal_bp, needs[:, 0]) - fatigue // 2, 0, BP)
    aroused = arousal >= config.aroused_bp
    emotion = np.select(
        [
            mood.grief_bp >= config.grief_bp,
            aroused & (valence < 0),
            fatigue >= config.tired_fatigue_bp,
            (needs[:, 2] >= config.lonely_need_bp) & (valence < 0),
            aroused,
            valence >= config.content_valence_bp,
        ],
        [
            Emotion.GRIEVING,
            Emotion.ANXIOUS,
            Emotion.TIRED,
            Emotion.LONELY,
            Emotion.DETERMINED,
            Emotion.CONTENT,
        ],
        Emotion.CALM,
    ).astype(np.uint8)
    multiplier = np.full(len(emotion), BP, dtype=np.int32)
    multiplier[emotion == Emotion.GRIEVING] = config.grieving_hard_objective_bp
    multiplier[emotion == Emotion.ANXIOUS] = config.anxious_hard_objective_bp
    return EmotionRows(emotion, multiplier)
