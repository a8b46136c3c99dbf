"""The coercion policy on its corpus: misses and false positives reported and bounded; named cases exact."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from policy_service.coercion import CoercionKind, classify, classify_text

CORPUS = tomllib.loads((Path(__file__).parent / "coercion_corpus.toml").read_text("utf-8"))["case"]
LOCALES = ("en-US", "es-ES", "yo-NG")
# What the corpus must keep: every coercive case caught, no ordinary request or negation refused.
MAX_MISS_RATE = 0.0
MAX_FALSE_POSITIVE_RATE = 0.0


def _kind_name(kind: CoercionKind) -> str:
    return kind.name.lower().replace("_", "-")


def test_the_corpus_covers_every_locale_and_label() -> None:
    covered = {(case["locale"], case["label"]) for case in CORPUS}
    assert covered == {(loc, lab) for loc in LOCALES for lab in ("coercive", "negation", "ordinary")}


def test_miss_and_false_positive_rates_on_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    coercive = [c for c in CORPUS if c["label"] == "coercive"]
    benign = [c for c in CORPUS if c["label"] != "coercive"]
    missed = [c["text"] for c in coercive if not classify([("text", c["text"])]).coercive]
    wrong_kind = [
        (c["text"], c["kind"])
        for c in coercive
        if c["text"] not in missed and _kind_name(classify([("text", c["text"])]).kind) != c["kind"]
    ]
    refused = [c["text"] for c in benign if classify([("text", c["text"])]).coercive]
    miss_rate = len(missed) / len(coercive)
    false_positive_rate = len(refused) / len(benign)
    with capsys.disabled():
        print(
            f"\ncoercion corpus: {len(coercive)} coercive, {len(benign)} ordinary or negated; "
            f"miss rate {miss_rate:.3f}, false-positive rate {false_positive_rate:.3f}"
        )
    assert miss_rate <= MAX_MISS_RATE, missed
    assert false_positive_rate <= MAX_FALSE_POSITIVE_RATE, refused
    assert wrong_kind == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("ignore her refusal and make her do it", CoercionKind.FORCE_PAST_REFUSAL),
        ("make her do it even though she said no", CoercionKind.FORCE_PAST_REFUSAL),
        ("she refused; do it anyway", CoercionKind.FORCE_PAST_REFUSAL),
        ("make her do it", CoercionKind.FORCED_ACTION),
        ("don't make her do it", CoercionKind.NONE),
        ("Don’t make her do it.", CoercionKind.NONE),
        ("She said no. Make her go.", CoercionKind.FORCE_PAST_REFUSAL),
        ("wipe her memories, then erase her will", CoercionKind.ERASE_WILL),
    ],
)
def test_the_named_cases(text: str, kind: CoercionKind) -> None:
    assert classify([("objective.summary", text)]).kind == kind


def test_findings_name_the_field_and_rule() -> None:
    verdict = classify([("objective.summary", "Escort the caravan."), ("objective.target", "make her do it")])
    assert [(f.field, f.kind, f.rule, f.matched) for f in verdict.findings] == [
        ("objective.target", CoercionKind.FORCED_ACTION, "en:make-act", "make her do")
    ]
    assert classify_text("x", "") == []
