"""This process's view of controls and in-flight runs: a pushed control cancels matching work at once."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.cost import Usage
from gateway.records import Control, ControlKey, RunSpec
from gateway.store.rows import AdmissionItem


@dataclass
class SchemaStats:
    calls: int = 0
    attempts: int = 0
    fallbacks: int = 0


@dataclass
class InFlightRun:
    """A run this process admitted or is serving a call for: its tasks, and what it has spent so far."""

    spec: RunSpec
    tasks: set[asyncio.Task[object]] = field(default_factory=set)
    stopped_by: Control | None = None
    schemas: dict[str, SchemaStats] = field(default_factory=dict)
    provider_errors: dict[str, int] = field(default_factory=dict)  # by error class
    provider_fallbacks: dict[str, int] = field(default_factory=dict)  # by the provider fallen back from
    usage: Usage = field(default_factory=Usage)
    micro_usd: int = 0
    cost_estimated: bool = False
    # A fused run's admission row, not written yet: its finish writes it in the same transaction, and
    # any other ending (or a failed call's audit record) writes it first (`GatewayCore._write_row`).
    unwritten: AdmissionItem | None = None
    # Why the run's last call was deferred by its providers' rate limits ('' = it was not): the run then
    # ends deferred, not failed.
    deferred_by: str = ""

    def met(self, error_class: str) -> None:
        """A provider error of this class met by one of the run's calls (retried past, or its end)."""
        self.provider_errors[error_class] = self.provider_errors.get(error_class, 0) + 1

    def fell_back(self, provider: str) -> None:
        """One of the run's calls left this provider for the next of its class's route."""
        self.provider_fallbacks[provider] = self.provider_fallbacks.get(provider, 0) + 1

    def add_usage(self, usage: Usage, micro_usd: int, *, estimated: bool) -> None:
        self.usage = Usage(
            self.usage.input_tokens + usage.input_tokens,
            self.usage.output_tokens + usage.output_tokens,
            self.usage.cache_read_tokens + usage.cache_read_tokens,
            self.usage.cache_write_tokens + usage.cache_write_tokens,
        )
        self.micro_usd += micro_usd
        self.cost_estimated = self.cost_estimated or estimated

    def stats(self) -> dict[str, object]:
        """The per-run rollup GetRetryStats aggregates (as in the Paracosm reference's /retry-stats)."""
        return {
            "schemas": {name: vars(s) for name, s in self.schemas.items()},
            "providerErrors": dict(self.provider_errors),
            "providerFallbacks": dict(self.provider_fallbacks),
            "caches": {
                "readTokens": self.usage.cache_read_tokens,
                "creationTokens": self.usage.cache_write_tokens,
            },
        }


def _stop(run: InFlightRun, control: Control) -> None:
    run.stopped_by = control
    for task in run.tasks:
        task.cancel()


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class InFlight:
    """Active controls (loaded before serving, then pushed) and the runs they may have to stop.

    The controls are indexed by what they target (scope, target, world), so the check every admission
    and boundary makes costs seven lookups (`RunSpec.control_targets`) however many controls are active:
    an operator who killed 10,000 Ori one by one made each check scan them all (7 ms, twice per
    admission). The runs are indexed the same way, so a pushed control finds the runs it stops without a
    pass over every run in flight (10,000 Ori killed one by one over 5,000 open runs made 50 million
    comparisons). A control past its expiry (on `clock`, Unix ms) stops nothing: the check drops it from
    the index when it meets it."""

    def __init__(self, clock: Callable[[], int] = _wall_clock_ms) -> None:
        self._clock = clock
        self._controls: dict[str, Control] = {}  # by id, in the order they arrived
        self._arrival: dict[str, int] = {}  # control id -> its place in that order
        self._arrivals = itertools.count()
        self._by_target: dict[ControlKey, dict[str, Control]] = {}
        self.runs: dict[str, InFlightRun] = {}
        self._runs_by_target: dict[ControlKey, dict[str, InFlightRun]] = {}

    def replace_controls(self, controls: list[Control]) -> None:
        self._controls, self._arrival, self._by_target = {}, {}, {}
        now_ms = self._clock()
        for control in controls:
            if control.applies(now_ms):
                self._add(control)
        for run in self.runs.values():
            if run.stopped_by is None and (stopping := self.blocking(run.spec)) is not None:
                _stop(run, stopping)

    def apply(self, control: Control) -> None:
        """A control was added or lifted somewhere; stop this process's matching work now."""
        if not control.applies(self._clock()):
            self._remove(control.control_id)
            return
        self._add(control)
        self._stop_matching(control)

    def _add(self, control: Control) -> None:
        """(A control pushed again keeps its place.)"""
        if control.control_id not in self._arrival:
            self._arrival[control.control_id] = next(self._arrivals)
        self._controls[control.control_id] = control
        self._by_target.setdefault(control.key, {})[control.control_id] = control

    def _remove(self, control_id: str) -> None:
        control = self._controls.pop(control_id, None)
        if control is None:
            return
        del self._arrival[control_id]
        key = control.key
        targeting = self._by_target[key]
        del targeting[control_id]
        if not targeting:
            del self._by_target[key]

    def _stop_matching(self, control: Control) -> None:
        for run in self.matching(control):
            if run.stopped_by is None:
                _stop(run, control)

    def matching(self, control: Control) -> list[InFlightRun]:
        """The runs in flight the control names, in the order they were tracked."""
        if not control.applies(self._clock()):
            return []
        return list(self._runs_by_target.get(control.key, {}).values())

    def blocking(self, spec: RunSpec) -> Control | None:
        """The first-arrived active, unexpired control that stops this run, if any."""
        if not self._by_target:
            return None
        first: Control | None = None
        now_ms = self._clock()
        for key in spec.control_targets:
            control = self._first_applying(key, now_ms)
            if control is None:
                continue
            if first is None or self._arrival[control.control_id] < self._arrival[first.control_id]:
                first = control
        return first

    def _first_applying(self, key: ControlKey, now_ms: int) -> Control | None:
        """The first-arrived unexpired control on `key` (each key's controls are in arrival order); the
        expired ones met before it leave the index."""
        targeting = self._by_target.get(key)
        if targeting is None:
            return None
        expired: list[str] = []
        found: Control | None = None
        for control in targeting.values():
            if not control.expired(now_ms):
                found = control
                break
            expired.append(control.control_id)
        for control_id in expired:
            self._remove(control_id)
        return found

    @property
    def controls(self) -> list[Control]:
        return list(self._controls.values())

    def track(self, spec: RunSpec) -> InFlightRun:
        run = self.runs.get(spec.run_id)
        if run is None:
            run = self.runs[spec.run_id] = InFlightRun(spec)
            for key in spec.control_targets:
                self._runs_by_target.setdefault(key, {})[spec.run_id] = run
            run.stopped_by = self.blocking(spec)
        return run

    def forget(self, run_id: str) -> InFlightRun | None:
        run = self.runs.pop(run_id, None)
        if run is not None:
            for key in run.spec.control_targets:
                tracked = self._runs_by_target[key]
                del tracked[run_id]
                if not tracked:
                    del self._runs_by_target[key]
        return run
