"""PostgreSQL stopped for 10 s under five running service processes: admission fails closed with
UNAVAILABLE, the kernel answers every tick with in-character actions throughout, and once the
database is back admissions succeed and the kernel's cognition work resumes, without restarting
any Egbe process.

The database is a private server (`private_postgres.py`): the machine's shared one serves other
tests and must not be stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from egbe.v1 import (
    action_pb2,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
)
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses
from tests.kernel_service.frames import FAR_MM, columns
from tests.system.cluster import running_cluster, spend
from tests.system.private_postgres import PrivatePostgres, postgres_bin_dir

OUTAGE_SECONDS = 10.0
AGENTS = 48
WORLD = "outage-world"
TICK_PERIOD = 0.05  # the world's 20 Hz; pacing only, the kernel reads no clock
RECOVERY_TIMEOUT = 90.0


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:  # never skipped: a run without them must not pass as if the outage were tested
        pytest.fail(
            "the PostgreSQL outage test needs the server binaries (initdb, pg_ctl): apt install postgresql"
        )
    server = PrivatePostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def services(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcesses]:
    with running_cluster(tmp_path_factory.mktemp("outage"), private_postgres.dsn) as processes:
        yield processes


@dataclass
class World:
    """A world server ticking at 20 Hz on its own thread, checking every answer as it comes."""

    services: ServiceProcesses
    answered: int = 0
    problems: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def register(self) -> None:
        rng = np.random.default_rng(5)  # test data only
        agents = [
            kernel_pb2.AgentRegistration(
                ori=common_pb2.OriRef(tenant_id="outage", world_id=WORLD, ori_id=f"ori-{i}"),
                traits=kernel_pb2.PersonalityTraits(
                    **{
                        f: int(rng.integers(0, 10_001))
                        for f in kernel_pb2.PersonalityTraits.DESCRIPTOR.fields_by_name
                    }
                ),
                values=[kernel_pb2.RankedValue(domain=kernel_pb2.VALUE_DOMAIN_KINSHIP, weight_bp=8000)],
            )
            for i in range(AGENTS)
        ]
        with grpc.insecure_channel(self.services.target("kernel")) as channel:
            kernel_pb2_grpc.KernelServiceStub(channel).RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=agents),
                metadata=bearer_metadata(self.services.tokens["world"]),
                timeout=30,
            )

    @staticmethod
    def frame(tick: int) -> perception_pb2.PerceptionBatch:
        """A player walks past a shifting few agents; needs drift, so the Ori keep wanting to think."""
        slots = np.arange(AGENTS)
        near = (slots % 6) == (tick // 40) % 6
        needs = (slots * 131 + tick * 17) % 10_001
        batch = columns(
            tick,
            player_proximity_mm=np.where(near, 1_500, FAR_MM),
            signal_flags=np.where(near, 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN, 0),
            goal_ref=1 + slots % 5,
            goal_progress_signature=np.full(AGENTS, tick // 20),
            need_safety_bp=needs,
            need_sustaining_bp=needs,
            need_social_bp=needs,
            need_purpose_bp=needs,
            fatigue_bp=np.full(AGENTS, (tick * 5) % 10_001),
        )
        batch.world_id = WORLD
        return batch

    def run(self) -> None:
        metadata = bearer_metadata(self.services.tokens["world"])
        with grpc.insecure_channel(self.services.target("kernel")) as channel:
            stub = kernel_pb2_grpc.KernelServiceStub(channel)
            tick = 0
            while not self.stop.is_set():
                tick += 1
                try:
                    reply = stub.Tick(
                        kernel_pb2.TickRequest(batch=self.frame(tick)), metadata=metadata, timeout=10
                    )
                except grpc.RpcError as error:
                    self.problems.append(f"tick {tick}: {error.code().name} {error.details()}")  # type: ignore[attr-defined]
                    return
                actions = reply.result.actions
                kinds = np.frombuffer(actions.columns.kind, dtype=np.uint8)
                if actions.tick != tick or actions.columns.count != AGENTS:
                    self.problems.append(
                        f"tick {tick}: answered tick {actions.tick} for {actions.columns.count}"
                    )
                elif (kinds == action_pb2.ACTION_KIND_UNSPECIFIED).any():
                    self.problems.append(f"tick {tick}: an agent without an action")
                self.answered += 1
                time.sleep(TICK_PERIOD)


def _admit(services: ServiceProcesses) -> grpc.StatusCode:
    """One AdmitRun as cognition's caller makes it; an admitted run is ended at once."""
    metadata = bearer_metadata(services.tokens["service"])
    with grpc.insecure_channel(services.target("gateway")) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        try:
            admitted = stub.AdmitRun(
                gateway_pb2.AdmitRunRequest(
                    ori=common_pb2.OriRef(tenant_id="outage", world_id=WORLD, ori_id="probe"),
                    tier=common_pb2.COGNITION_TIER_CLOTHO,
                    cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
                ),
                metadata=metadata,
                timeout=10,
            )
        except grpc.RpcError as error:
            return error.code()  # type: ignore[attr-defined,no-any-return]
        assert admitted.admitted, admitted.detail
        stub.EndRun(
            gateway_pb2.EndRunRequest(run_id=admitted.run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED),
            metadata=metadata,
            timeout=10,
        )
    return grpc.StatusCode.OK


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + RECOVERY_TIMEOUT
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise TimeoutError(f"{what} within {RECOVERY_TIMEOUT} s")


def test_postgres_down_for_ten_seconds_fails_admission_closed_and_spares_the_tick_path(
    private_postgres: PrivatePostgres, services: ServiceProcesses
) -> None:
    world = World(services)
    world.register()
    ticking = threading.Thread(target=world.run, name="world-server")
    ticking.start()
    try:
        # The kernel's dispatcher is running cognition through the gateway.
        _wait_for(lambda: spend(services).consumed_tokens > 0, "the kernel's first completed cognition call")
        assert _admit(services) == grpc.StatusCode.OK

        private_postgres.stop()
        answered_at_stop = world.answered
        outage_ends = time.monotonic() + OUTAGE_SECONDS
        during: list[grpc.StatusCode] = []
        while time.monotonic() < outage_ends:
            during.append(_admit(services))
            time.sleep(0.5)
        answered_during = world.answered - answered_at_stop
        private_postgres.start()

        # Back without restarting any Egbe process: admissions succeed and the kernel's work resumes.
        _wait_for(lambda: _admit(services) == grpc.StatusCode.OK, "AdmitRun succeeded after the restart")
        # A model call recorded in the ledger: admitted, rehydrated from the biography, generated.
        consumed_at_recovery = spend(services).consumed_tokens
        _wait_for(
            lambda: spend(services).consumed_tokens > consumed_at_recovery,
            "the kernel's cognition calls resumed",
        )
    finally:
        world.stop.set()
        ticking.join(timeout=30)

    assert during, "no admission was attempted during the outage"
    assert set(during) == {grpc.StatusCode.UNAVAILABLE}, during
    assert answered_during > 0
    assert world.problems == []
    assert all(services.running[name].poll() is None for name in services.running)
