"""A seeded mutation fuzz of every RPC of every service against one `egbe up`, starting from valid
requests so the breaks reach the code behind the first field check: each RPC gets a plausible request
(the seeded cluster's ids, an admitted run) broken one to three ways; RestoreSnapshot gets the
kernel's own snapshots from its tick log, broken the ways the kernel's snapshot fuzz knows plus
generic field breaks; ReplayTicks gets the tick log's own ticks, broken likewise.

Every answer is OK or a proper refusal (never INTERNAL or UNKNOWN), a refused request changes no state
(the kernel's agents and its tick log, the gateway's ledger and controls, the biography's log, each
read before and after), and every service still answers health afterwards. Bounded: `CASES_PER_RPC`
cases per RPC, `SNAPSHOT_CASES` restores and `REPLAY_CASES` replays, each from `random.Random(SEED)`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf.message import Message

from egbe.v1 import (
    action_pb2,
    biography_pb2,
    biography_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
)
from kernel_service.tick_log import read_records
from services.auth import bearer_metadata
from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded
from tests.kernel_service.frames import frame
from tests.kernel_service.snapshot_fuzz import BREAKS
from tests.system.conftest import FUZZ_MESSAGE_LIMITS, QUIET_LEDGER
from tests.system.request_mutations import Mutation, mutate, plausible
from tests.system.rpc_catalogue import Outcome, Rpc, all_rpcs, call
from tests.system.system_state import SEEDED_ORI, SEEDED_WORLD, State, StateProbe
from tests.system.test_bad_input import (
    CALL_TIMEOUT,
    _any_version,
    _deadline,
    _memory,
    _metadata,
    _rows,
    assert_proper,
    assert_still_serving,
    refused,
)

pytestmark = pytest.mark.slow

SEED = 31
CASES_PER_RPC = 10
SNAPSHOT_CASES = 48
REPLAY_CASES = 40
AGENTS = 6
BASE_TICKS = 3
TICK_LOG = "fuzz-ticks.log"
# After an accepted request, background work (a dispatched cognition call, an audit) may still land:
# the next case starts once two reads a little apart agree.
SETTLE_READS = 20
SETTLE_PAUSE = 0.05
RPCS = sorted(all_rpcs(), key=str)
# What a client sees when a refusal's status and details outgrow its trailer limit.
TRAILERS_TOO_LARGE = "metadata size exceeds"


@dataclass(frozen=True)
class Seeded:
    """What the fuzz starts from: the cluster, its ids, and the kernel's own snapshot and ticks."""

    egbe: EmbeddedEgbe
    channels: dict[str, grpc.Channel]
    ids: dict[str, str]
    snapshot: kernel_pb2.KernelSnapshot
    ticks: list[kernel_pb2.TickLogTick]
    tick_log: Path


@dataclass(frozen=True)
class Observed:
    """Everything the probe reads, plus the kernel's tick log length (a refused tick or restore must
    not be recorded)."""

    services: State
    tick_log_bytes: int


def _identity(name: str) -> biography_pb2.OriIdentity:
    return biography_pb2.OriIdentity(
        display_name=name, vocation="potter", home="Ile-Ife", locale="yo-NG", quirks=["hums while working"]
    )


def _registration(ori_id: str) -> kernel_pb2.AgentRegistration:
    return kernel_pb2.AgentRegistration(
        ori=common_pb2.OriRef(tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id=ori_id),
        identity=_identity(ori_id.title()),
    )


def _seed(egbe: EmbeddedEgbe, channels: dict[str, grpc.Channel]) -> dict[str, str]:
    """Agents (with identities, so the biography records them), a memory, a few ticks and an admitted
    run; returns the ids plausible requests name."""
    world = bearer_metadata(egbe.tokens["world"])
    service = bearer_metadata(egbe.tokens["service"])
    kernel = kernel_pb2_grpc.KernelServiceStub(channels["kernel"])
    kernel.RegisterAgents(
        kernel_pb2.RegisterAgentsRequest(
            world_id=SEEDED_WORLD, agents=[_registration(f"ori-{i}") for i in range(AGENTS)]
        ),
        metadata=world,
        timeout=CALL_TIMEOUT,
    )
    for tick in range(1, BASE_TICKS + 1):
        kernel.Tick(
            kernel_pb2.TickRequest(batch=_rows(tick, *(frame(s) for s in range(AGENTS)))),
            metadata=world,
            timeout=CALL_TIMEOUT,
        )
    memory = _append_memory(channels, service)
    admitted = gateway_pb2_grpc.CognitionGatewayServiceStub(channels["gateway"]).AdmitRun(
        gateway_pb2.AdmitRunRequest(
            ori=common_pb2.OriRef(tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id=SEEDED_ORI),
            tier=common_pb2.COGNITION_TIER_CLOTHO,
            cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
        ),
        metadata=service,
        timeout=CALL_TIMEOUT,
    )
    return {
        "world_id": SEEDED_WORLD,
        "ori_id": SEEDED_ORI,
        "tenant_id": "tenant-1",
        "run_id": admitted.run_id,
        "target": SEEDED_WORLD,
        "steward_id": "steward-1",
        "last_event_id": memory,
    }


def _append_memory(channels: dict[str, grpc.Channel], service: tuple[tuple[str, str], ...]) -> str:
    event = _memory("the fuzz's first memory")
    biography_pb2_grpc.BiographyServiceStub(channels["biography"]).Append(
        biography_pb2.AppendRequest(ori_id=SEEDED_ORI, expected_version=_any_version(), events=[event]),
        metadata=service,
        timeout=CALL_TIMEOUT,
    )
    return event.event_id


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    data_dir = tmp_path_factory.mktemp("egbe-fuzz-every-rpc")
    tick_log = data_dir / TICK_LOG
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EGBE_KERNEL__TICK_LOG_PATH", str(tick_log))
        env.setenv("EGBE_KERNEL__SNAPSHOT_EVERY_TICKS", "1")
        for name, value in {**FUZZ_MESSAGE_LIMITS, **QUIET_LEDGER}.items():
            env.setenv(name, value)
        egbe = start_embedded(data_dir)
    channels = {name: grpc.insecure_channel(target) for name, target in egbe.targets.items()}
    try:
        ids = _seed(egbe, channels)
        records = list(read_records(tick_log))
        snapshots = [r.snapshot for r in records if r.WhichOneof("entry") == "snapshot"]
        ticks = [r.tick for r in records if r.WhichOneof("entry") == "tick"]
        assert len(ticks) == BASE_TICKS
        assert snapshots[-1].last_tick == BASE_TICKS
        yield Seeded(egbe, channels, ids, snapshots[-1], ticks, tick_log)
    finally:
        for channel in channels.values():
            channel.close()
    assert egbe.process.poll() is None, "egbe up died under the fuzz"
    assert stop_embedded(egbe) == 0


@pytest.fixture(scope="module")
def probe(seeded: Seeded) -> StateProbe:
    return StateProbe(seeded.channels, seeded.egbe.tokens)


def _timeless(control: bytes) -> bytes:
    """A control as a refused request could change it: an expiring control turns inactive with time,
    so its `active` and `expired` are left out (a control without expiry keeps them)."""
    read = gateway_pb2.Control.FromString(control)
    if read.HasField("expires_at"):
        read.ClearField("active")
        read.ClearField("expired")
    return read.SerializeToString(deterministic=True)


def _observe(probe: StateProbe, seeded: Seeded) -> Observed:
    state = probe.snapshot()
    timeless = replace(state, controls=tuple(_timeless(c) for c in state.controls))
    return Observed(timeless, seeded.tick_log.stat().st_size)


def _settled(probe: StateProbe, seeded: Seeded) -> Observed:
    """The state once background work from earlier accepted requests has landed."""
    last = _observe(probe, seeded)
    for _ in range(SETTLE_READS):
        time.sleep(SETTLE_PAUSE)
        now = _observe(probe, seeded)
        if now == last:
            return now
        last = now
    raise AssertionError("the cluster's state kept changing with no request in flight")


def _reset_kernel(seeded: Seeded) -> None:
    """The kernel back to the seeded snapshot, so each case starts from the same world."""
    kernel_pb2_grpc.KernelServiceStub(seeded.channels["kernel"]).RestoreSnapshot(
        kernel_pb2.RestoreSnapshotRequest(snapshot=seeded.snapshot),
        metadata=bearer_metadata(seeded.egbe.tokens["world"]),
        timeout=CALL_TIMEOUT,
    )


def _next_tick(seeded: Seeded) -> int:
    return seeded.snapshot.last_tick + 1


def _tick_batch(seeded: Seeded) -> Any:
    return _rows(_next_tick(seeded), *(frame(s) for s in range(AGENTS)))


def _logged_tick(seeded: Seeded, rng: random.Random) -> kernel_pb2.TickLogTick:
    """One of the tick log's own ticks, renumbered to follow the seeded snapshot."""
    logged = kernel_pb2.TickLogTick()
    logged.CopyFrom(rng.choice(seeded.ticks))
    logged.batch.tick = _next_tick(seeded)
    return logged


# Valid requests the descriptor alone cannot build: the kernel's own state and tick inputs, and
# requests that must name something new or carry a consistent version.
VALID: dict[str, Callable[[Seeded, random.Random], Message]] = {
    "KernelService.RestoreSnapshot": lambda s, r: kernel_pb2.RestoreSnapshotRequest(snapshot=s.snapshot),
    "KernelService.ReplayTicks": lambda s, r: kernel_pb2.ReplayTicksRequest(tick=_logged_tick(s, r)),
    "KernelService.Tick": lambda s, r: kernel_pb2.TickRequest(batch=_tick_batch(s)),
    "KernelService.StreamTicks": lambda s, r: kernel_pb2.StreamTicksRequest(batch=_tick_batch(s)),
    "KernelService.RegisterAgents": lambda s, r: kernel_pb2.RegisterAgentsRequest(
        world_id=SEEDED_WORLD, agents=[_registration(f"fuzz-{r.getrandbits(32):08x}")]
    ),
    "BiographyService.Append": lambda s, r: biography_pb2.AppendRequest(
        ori_id=SEEDED_ORI, expected_version=_any_version(), events=[_memory("a fuzzed memory")]
    ),
    "BiographyService.RegisterIdentities": lambda s, r: biography_pb2.RegisterIdentitiesRequest(
        registrations=[
            biography_pb2.IdentityRegistration(
                ori_id=f"ori-{r.randrange(AGENTS)}", identity=_identity("Adunni"), world_tick=1
            )
        ]
    ),
}


def _valid(rpc: Rpc, seeded: Seeded, rng: random.Random) -> Message:
    build = VALID.get(str(rpc))
    return build(seeded, rng) if build else plausible(rpc.method.input_type, seeded.ids)


def _numpy_break(name: str) -> Mutation:
    """One of the kernel snapshot fuzz's breaks, on a request's snapshot."""

    def apply(request: Message, rng: random.Random) -> str:
        BREAKS[name](request.snapshot, np.random.default_rng(rng.getrandbits(32)))  # type: ignore[attr-defined]
        return ""

    return apply


def _merged_result(**fields: int) -> Mutation:
    def apply(request: Message, rng: random.Random) -> str:
        slot = rng.choice([0, AGENTS - 1, AGENTS, 2**32 - 1])
        request.tick.merged_results.add(slot=slot, **fields)  # type: ignore[attr-defined]
        return f"slot {slot}"

    return apply


def _every_tier_unavailable(request: Message, rng: random.Random) -> str:
    request.tick.cognition_unavailable_tiers = 2**32 - 1  # type: ignore[attr-defined]
    return ""


SNAPSHOT_BREAKS: dict[str, Mutation] = {name: _numpy_break(name) for name in BREAKS}
TICK_BREAKS: dict[str, Mutation] = {
    "merged kind 300": _merged_result(kind=300),
    "merged plan step 70000": _merged_result(kind=action_pb2.ACTION_KIND_SAY, plan_step=70_000),
    "merged goal ref 2^32-1": _merged_result(kind=action_pb2.ACTION_KIND_SAY, goal_ref=2**32 - 1),
    "unavailable tiers all set": _every_tier_unavailable,
}
EXTRA_BREAKS = {"KernelService.RestoreSnapshot": SNAPSHOT_BREAKS, "KernelService.ReplayTicks": TICK_BREAKS}


@dataclass
class Findings:
    cases: int = 0
    refused: int = 0
    problems: list[str] | None = None

    def add(self, problem: str) -> None:
        self.problems = [*(self.problems or []), problem]


def _changes(before: Observed, after: Observed) -> list[str]:
    changed = [n for n in vars(before.services) if getattr(before.services, n) != getattr(after.services, n)]
    if before.tick_log_bytes != after.tick_log_bytes:
        changed.append("kernel tick log")
    return changed


def _check(rpc: Rpc, broken: str, outcome: Outcome, seen: tuple[Observed, Observed], found: Findings) -> None:
    try:
        assert_proper(rpc, outcome)
        assert TRAILERS_TOO_LARGE not in outcome.details, f"{rpc}: the refusal did not reach the client"
    except AssertionError as error:
        found.add(f"{rpc} [{broken}]: {error}")
    if refused(rpc, outcome):
        found.refused += 1
        changed = _changes(*seen)
        if changed:
            found.add(
                f"{rpc} [{broken}]: refused {outcome.code.name} {outcome.details[:160]!r}, changed {changed}"
            )


def _after_accepted_kernel_state(seeded: Seeded, found: Findings, broken: str) -> None:
    """An accepted restore or replay leaves a kernel that ticks properly (the C core reads its state)."""
    tick = kernel_pb2.TickRequest(batch=_rows(0))
    rpc = next(r for r in RPCS if str(r) == "KernelService.Tick")
    outcome = call(seeded.channels["kernel"], rpc, [tick], _metadata(seeded.egbe, rpc), CALL_TIMEOUT)
    try:
        assert_proper(rpc, outcome)
    except AssertionError as error:
        found.add(f"Tick after an accepted [{broken}]: {error}")


def fuzz(rpc: Rpc, seeded: Seeded, probe: StateProbe, cases: int, seed: int) -> Findings:
    rng = random.Random(f"{seed}:{rpc}")
    found = Findings()
    metadata = _metadata(seeded.egbe, rpc)
    for _ in range(cases):
        if rpc.egbe_service == "kernel":
            _reset_kernel(seeded)
        count = rng.choice([1, 2]) if rpc.method.client_streaming else 1
        requests = [_valid(rpc, seeded, rng) for _ in range(count)]
        target = rng.randrange(count)
        broken = mutate(requests[target], rng, EXTRA_BREAKS.get(str(rpc)))
        before = _settled(probe, seeded)
        outcome = call(seeded.channels[rpc.egbe_service], rpc, requests, metadata, _deadline(rpc))
        found.cases += 1
        _check(rpc, broken, outcome, (before, _observe(probe, seeded)), found)
        if outcome.code == grpc.StatusCode.OK and str(rpc) in EXTRA_BREAKS:
            _after_accepted_kernel_state(seeded, found, broken)
    assert_still_serving(seeded.channels, seeded.egbe)
    return found


# Defects the fuzz finds that are not fixed yet: RPC -> the defect, so the case stays visible.
KNOWN_DEFECTS: dict[str, str] = {}


def _cases(rpc: Rpc) -> Any:
    marks = (
        [pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[str(rpc)])] if str(rpc) in KNOWN_DEFECTS else []
    )
    return pytest.param(rpc, id=str(rpc), marks=marks)


@pytest.mark.parametrize("rpc", [_cases(rpc) for rpc in RPCS])
def test_mutated_valid_requests_get_proper_answers_and_refusals_change_nothing(
    rpc: Rpc, seeded: Seeded, probe: StateProbe
) -> None:
    found = fuzz(rpc, seeded, probe, CASES_PER_RPC, SEED)
    assert found.cases == CASES_PER_RPC
    assert found.problems is None, "\n".join(found.problems or [])


@pytest.mark.parametrize(
    ("name", "cases"),
    [("KernelService.RestoreSnapshot", SNAPSHOT_CASES), ("KernelService.ReplayTicks", REPLAY_CASES)],
)
def test_mutated_snapshots_and_tick_log_ticks_are_taken_whole_or_refused_changing_nothing(
    name: str, cases: int, seeded: Seeded, probe: StateProbe
) -> None:
    rpc = next(r for r in RPCS if str(r) == name)
    found = fuzz(rpc, seeded, probe, cases, SEED + 1)
    assert found.problems is None, "\n".join(found.problems or [])
    # The breaks must mostly be refused, or the fuzz is not breaking what it thinks it breaks.
    assert found.refused >= cases // 2, found


def test_the_state_read_sees_what_a_kernel_write_changes(seeded: Seeded, probe: StateProbe) -> None:
    """The "changed nothing" check means something: an accepted registration with an identity shows in
    the kernel's agents, in the biography (the identity event) and in the kernel's tick log."""
    _reset_kernel(seeded)
    rpc = next(r for r in RPCS if str(r) == "KernelService.RegisterAgents")
    before = _settled(probe, seeded)
    request = kernel_pb2.RegisterAgentsRequest(world_id=SEEDED_WORLD, agents=[_registration("one-more")])
    outcome = call(seeded.channels["kernel"], rpc, [request], _metadata(seeded.egbe, rpc), CALL_TIMEOUT)
    assert outcome.code == grpc.StatusCode.OK, outcome
    assert _changes(before, _observe(probe, seeded)) == ["kernel_agents", "biography_head", "kernel tick log"]
    _reset_kernel(seeded)
