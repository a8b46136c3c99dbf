"""The control view every admission and boundary checks: indexed by target, it must answer exactly what
a scan of every active control in arrival order answers (the first-arrived control matching the run),
through any sequence of controls added, pushed again and lifted."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from gateway.config import TIER_NAMES
from gateway.inflight import InFlight
from gateway.records import Control, ControlKind, ControlScope, RunSpec

ORIS = ("ada", "bram", "cyr")
TENANTS = ("t1", "t2")
WORLDS = ("w1", "w2")
TIERS = tuple(TIER_NAMES)
NOW_MS = 1_000  # the view's clock in these tests: a control expiring at or before it stops nothing


def control(
    control_id: str,
    scope: ControlScope,
    target: str,
    world: str = "",
    *,
    active: bool = True,
    expires_at_ms: int = 0,
) -> Control:
    return Control(
        control_id, ControlKind.KILL, scope, target, "reason", "op", 0, active, world, expires_at_ms
    )


def run(ori: str, tier: int = 1, tenant: str = "t1", run_id: str = "r1", world: str = "w1") -> RunSpec:
    return RunSpec(run_id, tenant, world, ori, tier, 1, 2, 2, 4_000)


def scanned(controls: dict[str, Control], spec: RunSpec) -> Control | None:
    """The reference: every active, unexpired control, in arrival order."""
    return next((c for c in controls.values() if c.matches(spec, NOW_MS)), None)


def view_at_now() -> InFlight:
    return InFlight(clock=lambda: NOW_MS)


worlds = st.sampled_from(("", *WORLDS))
targets = st.one_of(
    st.tuples(st.just(ControlScope.ORI), st.sampled_from(ORIS), worlds),
    st.tuples(st.just(ControlScope.TIER), st.sampled_from([TIER_NAMES[t] for t in TIERS]), worlds),
    st.tuples(st.just(ControlScope.TENANT), st.sampled_from(TENANTS), worlds),
    st.tuples(st.just(ControlScope.WORLD), st.sampled_from(WORLDS), st.just("")),
)
# When a control expires: never, already (at or before the clock), or later.
expiries = st.sampled_from((0, NOW_MS - 1, NOW_MS, NOW_MS + 1))
# (control number, scope, target and world, its expiry, lift it instead of adding it)
operations = st.lists(st.tuples(st.integers(0, 7), targets, expiries, st.booleans()), max_size=40)


@given(operations)
def test_the_index_answers_what_a_scan_in_arrival_order_answers(
    steps: list[tuple[int, tuple[ControlScope, str, str], int, bool]],
) -> None:
    view = view_at_now()
    reference: dict[str, Control] = {}
    made: dict[str, Control] = {}  # a control id always names the same scope, target, world and expiry
    for number, key, expires_at_ms, lift in steps:
        control_id = f"c{number}"
        made.setdefault(control_id, control(control_id, *key, expires_at_ms=expires_at_ms))
        if lift:
            view.apply(dataclasses.replace(made[control_id], active=False))
            reference.pop(control_id, None)
        else:
            view.apply(made[control_id])
            reference.setdefault(control_id, made[control_id])  # pushed again: keeps its place
        for ori in ORIS:
            for tier in TIERS:
                for tenant in TENANTS:
                    for world in WORLDS:
                        spec = run(ori, tier, tenant, world=world)
                        assert view.blocking(spec) == scanned(reference, spec)
    assert view.controls == [c for c in reference.values() if c.applies(NOW_MS)]


def test_a_world_scoped_control_stops_only_that_worlds_runs_and_an_expired_one_nothing() -> None:
    clock = [NOW_MS]
    view = InFlight(clock=lambda: clock[0])
    view.apply(control("k", ControlScope.ORI, "ada", "w1", expires_at_ms=NOW_MS + 10))
    assert view.blocking(run("ada", world="w1")) == control(
        "k", ControlScope.ORI, "ada", "w1", expires_at_ms=NOW_MS + 10
    )
    assert view.blocking(run("ada", world="w2")) is None
    clock[0] = NOW_MS + 10
    assert view.blocking(run("ada", world="w1")) is None
    assert view.controls == []  # (met expired: dropped from the index)


def test_the_first_arrived_of_several_matching_controls_is_the_one_named() -> None:
    view = InFlight()
    view.apply(control("tenant", ControlScope.TENANT, "t1"))
    view.apply(control("ori", ControlScope.ORI, "ada"))
    assert view.blocking(run("ada")) == control("tenant", ControlScope.TENANT, "t1")
    view.apply(control("tenant", ControlScope.TENANT, "t1", active=False))
    assert view.blocking(run("ada")) == control("ori", ControlScope.ORI, "ada")
    assert view.blocking(run("bram")) is None


def test_a_control_added_after_a_lift_still_comes_after_the_earlier_ones() -> None:
    view = InFlight()
    view.apply(control("a", ControlScope.ORI, "bram"))
    view.apply(control("b", ControlScope.TENANT, "t1"))
    view.apply(control("a", ControlScope.ORI, "bram", active=False))
    view.apply(control("c", ControlScope.ORI, "ada"))
    assert view.blocking(run("ada")) == control("b", ControlScope.TENANT, "t1")


async def test_replacing_the_controls_stops_each_matching_run_with_its_first_control() -> None:
    """What a (re)connected push channel does: every active control, loaded afresh."""
    view = InFlight()
    ada, bram = view.track(run("ada", run_id="r1")), view.track(run("bram", run_id="r2"))
    work = asyncio.get_running_loop().create_future()
    ada.tasks.add(work)  # type: ignore[arg-type]
    view.replace_controls(
        [
            control("lifted", ControlScope.ORI, "ada", active=False),
            control("tier", ControlScope.TIER, TIER_NAMES[1]),
            control("ori", ControlScope.ORI, "ada"),
        ]
    )
    assert ada.stopped_by == control("tier", ControlScope.TIER, TIER_NAMES[1])
    assert bram.stopped_by == control("tier", ControlScope.TIER, TIER_NAMES[1])
    assert work.cancelled()
    assert [c.control_id for c in view.controls] == ["tier", "ori"]


@dataclass(frozen=True)
class Track:
    spec: RunSpec


@dataclass(frozen=True)
class Forget:
    run_id: str


@dataclass(frozen=True)
class Push:
    number: int
    target: tuple[ControlScope, str, str]
    lift: bool


run_ids = st.sampled_from(("r1", "r2", "r3", "r4"))
specs = st.builds(
    lambda run_id, ori, tier, tenant, world: run(ori, tier, tenant, run_id, world),
    run_ids,
    st.sampled_from(ORIS),
    st.sampled_from(TIERS),
    st.sampled_from(TENANTS),
    st.sampled_from(WORLDS),
)
run_steps = st.lists(
    st.one_of(
        st.builds(Track, specs),
        st.builds(Forget, run_ids),
        st.builds(Push, st.integers(0, 5), targets, st.booleans()),
    ),
    max_size=40,
)


@given(run_steps)
def test_a_pushed_control_stops_exactly_the_runs_a_scan_of_every_run_would_stop(
    steps: list[Track | Forget | Push],
) -> None:
    """The runs indexed by target against the reference: every run in flight, scanned at each push."""
    view = view_at_now()
    controls: dict[str, Control] = {}  # the active ones, in arrival order
    made: dict[str, Control] = {}  # a control id always names the same scope and target
    tracked: dict[str, RunSpec] = {}
    stopped: dict[str, Control | None] = {}  # the reference: each tracked run's stopping control
    for step in steps:
        if isinstance(step, Track):
            spec = tracked.setdefault(step.spec.run_id, step.spec)  # (tracked again: the same run)
            stopped.setdefault(spec.run_id, scanned(controls, spec))
            view.track(spec)
        elif isinstance(step, Forget):
            tracked.pop(step.run_id, None)
            stopped.pop(step.run_id, None)
            view.forget(step.run_id)
        else:
            pushed = made.setdefault(f"c{step.number}", control(f"c{step.number}", *step.target))
            if step.lift:
                controls.pop(pushed.control_id, None)
                view.apply(dataclasses.replace(pushed, active=False))
                continue
            controls.setdefault(pushed.control_id, pushed)
            assert view.matching(pushed) == [r for r in view.runs.values() if pushed.matches(r.spec, NOW_MS)]
            for run_id, stopping in stopped.items():
                if stopping is None and pushed.matches(tracked[run_id], NOW_MS):
                    stopped[run_id] = pushed
            view.apply(pushed)
        assert {run_id: r.stopped_by for run_id, r in view.runs.items()} == stopped


def test_a_forgotten_run_is_no_longer_found_by_a_control() -> None:
    view = InFlight()
    view.track(run("ada", run_id="r1"))
    view.track(run("ada", run_id="r2"))
    view.forget("r1")
    kill = control("k", ControlScope.ORI, "ada")
    assert [r.spec.run_id for r in view.matching(kill)] == ["r2"]
    view.forget("r2")
    assert view.matching(kill) == []
    assert view.matching(control("t", ControlScope.TENANT, "t1")) == []
