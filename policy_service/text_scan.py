"""Phrase and term matching the evaluators share: case-folded, word-bounded, punctuation-blind."""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[a-z0-9\u00c0-\u024f\u1e00-\u1eff']+")

# Words that carry no claim content, so overlap on them proves nothing.
STOPWORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "also",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "could",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "every",
        "from",
        "further",
        "have",
        "having",
        "here",
        "itself",
        "just",
        "more",
        "most",
        "once",
        "only",
        "other",
        "ours",
        "ourselves",
        "over",
        "same",
        "should",
        "some",
        "such",
        "than",
        "that",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "until",
        "very",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "whom",
        "with",
        "would",
        "your",
        "yours",
        "yourself",
        "into",
        "onto",
        "upon",
        "said",
        "says",
        "will",
        "shall",
    ]
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens; apostrophes stay inside words (i'm, don't)."""
    return _WORD.findall(text.casefold().replace("\u2019", "'"))


def normalized(text: str) -> str:
    """Words joined by single spaces, padded so a phrase search is word-bounded."""
    return f" {' '.join(words(text))} "


def phrases_found(text: str, phrases: Iterable[str]) -> list[str]:
    """The phrases that occur in text as whole words, in the order given."""
    haystack = normalized(text)
    return [phrase for phrase in phrases if normalized(phrase) in haystack]


def significant_terms(text: str, min_length: int) -> set[str]:
    """Content words of text: long enough and not a stopword."""
    return {word for word in words(text) if len(word) >= min_length and word not in STOPWORDS}
