"""Recorded eval scores in the store: `egbe eval` records a target's score per suite (with its operator
audit row) and every gateway is told, so routing reads the new evidence without a restart."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.evals.scores import EvalScore, ScoreBook
from gateway.store.reports import record_change
from gateway.store.tx import StoreCore, Tx

# The push payload that tells every gateway to reload the scores (a control's payload is 32 hex digits,
# the limits' "limits": none collide).
EVAL_SCORES_CHANGED = "eval-scores"
_COLUMNS = (
    "provider, model_id, suite, suite_version, score_bp, cases, checks_passed, checks_total, offline,"
    " recorded_at_ms"
)


def _score_from(row: Sequence[object]) -> EvalScore:
    provider, model_id, suite, version, bp, cases, passed, total, offline, at_ms = row
    return EvalScore(
        provider=str(provider),
        model_id=str(model_id),
        suite=str(suite),
        suite_version=int(str(version)),
        score_bp=int(str(bp)),
        cases=int(str(cases)),
        checks_passed=int(str(passed)),
        checks_total=int(str(total)),
        offline=bool(offline),
        recorded_at_ms=int(str(at_ms)),
    )


async def load_scores(tx: Tx) -> ScoreBook:
    rows = await tx.all(f"SELECT {_COLUMNS} FROM gateway_eval_scores")  # noqa: S608 - the store's names
    return ScoreBook(_score_from(row) for row in rows)


class EvalScoreStore(StoreCore):
    """Scores recorded per target and suite, and the listeners every new recording is pushed to."""

    def __init__(self, for_update: str) -> None:
        super().__init__(for_update)
        self._score_listeners: list[Callable[[ScoreBook], None]] = []

    def on_eval_scores_change(self, listener: Callable[[ScoreBook], None]) -> None:
        """Called with every recorded score whenever one is recorded, by this process or (PostgreSQL) any
        other."""
        self._score_listeners.append(listener)

    def _publish_scores(self, book: ScoreBook) -> None:
        for listener in self._score_listeners:
            listener(book)

    async def load_eval_scores(self) -> ScoreBook:
        return await self.transact(load_scores, durable=False)

    async def record_eval_scores(self, scores: Sequence[EvalScore], *, operator_id: str) -> ScoreBook:
        """Replace each target's score on its suite, audit the recording, and push every score to every
        gateway."""

        async def body(tx: Tx) -> ScoreBook:
            for score in scores:
                tx.execute(  # (the store's own SQL: every value is a bound parameter)
                    f"INSERT INTO gateway_eval_scores ({_COLUMNS})"  # noqa: S608
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (provider, model_id, suite) DO UPDATE SET"
                    " suite_version = excluded.suite_version, score_bp = excluded.score_bp,"
                    " cases = excluded.cases, checks_passed = excluded.checks_passed,"
                    " checks_total = excluded.checks_total, offline = excluded.offline,"
                    " recorded_at_ms = excluded.recorded_at_ms",
                    (
                        score.provider,
                        score.model_id,
                        score.suite,
                        score.suite_version,
                        score.score_bp,
                        score.cases,
                        score.checks_passed,
                        score.checks_total,
                        int(score.offline),
                        score.recorded_at_ms,
                    ),
                )
                record_change(
                    tx,
                    "EVAL:RECORD",
                    operator_id=operator_id,
                    detail=f"{score.provider}:{score.model_id} on {score.suite} v{score.suite_version}:"
                    f" {score.score_bp} bp",
                    now_ms=score.recorded_at_ms,
                )
            tx.notify(EVAL_SCORES_CHANGED)
            return await load_scores(tx)

        book = await self.transact(body)
        self._publish_scores(book)
        return book
