"""Runs a suite through a model class's route: each target of the route scored separately, through its
own provider's adapter, built the way the gateway builds it (`gateway/server.py`)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gateway.adapters.base import ModelAdapter
from gateway.adapters.offline import OfflineAdapter
from gateway.config import GatewayConfig
from gateway.evals.scores import EvalScore
from gateway.evals.scoring import CHECKS, CaseScore, Check, score_bp, score_case
from gateway.evals.suite import EvalCase, Suite
from gateway.provider_errors import ProviderError
from gateway.routing import ANTHROPIC_PROVIDER
from gateway.server import build_adapter, provider_adapter
from services.errors import EgbeError
from services.settings import UserError

# Under which the offline adapter's scores are recorded (`egbe eval --offline`, or no key and no table).
OFFLINE_PROVIDER = "offline"
OFFLINE_MODEL_ID = "deterministic-v1"
CASES_AT_ONCE = 4  # calls in flight per target: a provider's rate limits are not the suite's to test


@dataclass(frozen=True)
class EvalTarget:
    """One target of a class's route, with the adapter its calls go through."""

    provider: str
    model_id: str
    adapter: ModelAdapter


@dataclass(frozen=True)
class TargetResult:
    """A target's scored cases on one suite."""

    suite: Suite
    provider: str
    model_id: str
    offline: bool
    cases: tuple[CaseScore, ...]

    @property
    def checks_passed(self) -> int:
        return sum(case.passed for case in self.cases)

    @property
    def checks_total(self) -> int:
        return sum(case.total for case in self.cases)

    @property
    def score_bp(self) -> int:
        return score_bp(self.checks_passed, self.checks_total)

    def failed_checks(self) -> dict[str, int]:
        """How many cases failed each check, by check name."""
        failed = Counter(check.name for case in self.cases for check in case.checks if not check.passed)
        return dict(sorted(failed.items()))

    def recorded(self, now_ms: int) -> EvalScore:
        return EvalScore(
            provider=self.provider,
            model_id=self.model_id,
            suite=self.suite.name,
            suite_version=self.suite.version,
            score_bp=self.score_bp,
            cases=len(self.cases),
            checks_passed=self.checks_passed,
            checks_total=self.checks_total,
            offline=self.offline,
            recorded_at_ms=now_ms,
        )


def offline_target() -> EvalTarget:
    return EvalTarget(OFFLINE_PROVIDER, OFFLINE_MODEL_ID, OfflineAdapter())


def class_targets(
    config: GatewayConfig, model_class: str, environ: Mapping[str, str] = os.environ
) -> list[EvalTarget]:
    """The class's route as the gateway would send its calls: with a providers table each target through
    its provider's adapter; without, Anthropic's model id for the class when ANTHROPIC_API_KEY is set,
    else the offline adapter."""
    if config.providers:
        return [
            EvalTarget(
                target.provider,
                target.model_id,
                provider_adapter(config, target.provider, config.providers[target.provider], environ),
            )
            for target in config.routing.class_targets[model_class]
        ]
    adapter = build_adapter(config, environ)
    if adapter.offline:
        return [offline_target()]
    return [EvalTarget(ANTHROPIC_PROVIDER, config.routing.model_ids[model_class], adapter)]


async def _score_one(suite: Suite, case: EvalCase, target: EvalTarget, model_class: str) -> CaseScore:
    """The case sent to the target and its reply scored; a call that got no reply fails every check."""
    request = replace(suite.model_request(case), model_class=model_class, concrete_model_id=target.model_id)
    try:
        reply = await target.adapter.generate(request)
    except (ProviderError, EgbeError) as error:
        why = f"no reply: {error}"[:200]
        return CaseScore(case.case_id, tuple(Check(name, False, why) for name in CHECKS[suite.mode]))
    return score_case(suite, case, reply.text)


async def run_target(suite: Suite, target: EvalTarget, model_class: str) -> TargetResult:
    """Every case of the suite through one target, a few at a time, scored in case order. A target that
    answered no case at all is refused (UserError): its key, URL or model id is wrong, not its quality."""
    gate = asyncio.Semaphore(CASES_AT_ONCE)

    async def scored(case: EvalCase) -> CaseScore:
        async with gate:
            return await _score_one(suite, case, target, model_class)

    cases = tuple(await asyncio.gather(*(scored(case) for case in suite.cases)))
    if all(case.checks[0].detail.startswith("no reply:") for case in cases):
        raise UserError(
            f"{target.provider}:{target.model_id} answered none of the {len(cases)} cases of {suite.name}"
            f" ({cases[0].checks[0].detail}); check providers.{target.provider} and its model id"
        )
    return TargetResult(suite, target.provider, target.model_id, target.adapter.offline, cases)


async def run_suite(suite: Suite, targets: list[EvalTarget], model_class: str) -> list[TargetResult]:
    """The suite through each target of a route in turn."""
    return [await run_target(suite, target, model_class) for target in targets]
