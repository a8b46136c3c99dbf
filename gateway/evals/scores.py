"""A recorded eval score: what one provider's model scored on one suite version, and the book of them
routing reads (keyed by provider, model id and suite)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gateway.evals.suite import shipped_version


@dataclass(frozen=True)
class EvalScore:
    """One target's result on one suite, as the store keeps it."""

    provider: str
    model_id: str
    suite: str
    suite_version: int
    score_bp: int
    cases: int
    checks_passed: int
    checks_total: int
    offline: bool
    recorded_at_ms: int


class ScoreBook:
    """Every recorded score, the latest per (provider, model id, suite); a score recorded on another
    version of a suite than the one shipped does not count."""

    def __init__(self, scores: Iterable[EvalScore] = ()) -> None:
        self._scores = {(s.provider, s.model_id, s.suite): s for s in scores}

    def __len__(self) -> int:
        return len(self._scores)

    def __iter__(self) -> Iterator[EvalScore]:
        return iter(self._scores.values())

    def recorded(self, provider: str, model_id: str, suite: str) -> EvalScore | None:
        """The score recorded for the target on the suite, whatever its version."""
        return self._scores.get((provider, model_id, suite))

    def current(self, provider: str, model_id: str, suite: str) -> EvalScore | None:
        """The target's score on the shipped version of the suite, None when it has none."""
        score = self.recorded(provider, model_id, suite)
        return score if score is not None and score.suite_version == shipped_version(suite) else None
