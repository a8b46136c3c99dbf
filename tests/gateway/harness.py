"""A gateway served in-process on a real socket (port 0), with stubs holding each role's token."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from assembly.settings import EgbeSettings, load_settings
from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.adapters.offline import OfflineAdapter
from gateway.config import TIER_NAMES, AnthropicConfig, BudgetConfig, GatewayConfig, LeaseConfig
from gateway.evals.scores import EvalScore
from gateway.evals.suite import load_suite
from gateway.routing import route_targets
from gateway.server import build_adapter, build_bundle, build_store
from gateway.service import CognitionGateway
from gateway.store.base import GatewayStore
from gateway.store.postgres import PostgresGatewayStore
from gateway.store.sqlite import SqliteGatewayStore
from services.auth import Role, TokenStore, bearer_metadata
from services.server import RunningService, start_service
from services.settings import Endpoint
from tests.conftest import ROOT

CLOTHO, LACHESIS, ATROPOS = (
    common_pb2.COGNITION_TIER_CLOTHO,
    common_pb2.COGNITION_TIER_LACHESIS,
    common_pb2.COGNITION_TIER_ATROPOS,
)
CAUSE_FOR_TIER = {
    CLOTHO: 1,
    LACHESIS: 2,
    ATROPOS: 3,
}


async def anthropic_gateway(
    data_dir: Path, database_url: str | None, *, metrics_port: int | None = None, **gateway: Any
) -> GatewayHarness:
    """A gateway on the Anthropic adapter (the environment `fake` sets): two attempts and a short backoff,
    so a transient error gives up quickly; `gateway` sets more of its config, `metrics_port` serves its
    metrics."""
    anthropic = AnthropicConfig(max_attempts=2, backoff_base_seconds=0.01, backoff_max_seconds=0.05)
    settings = gateway_settings(
        data_dir, database_url, metrics_port=metrics_port, anthropic=anthropic, **gateway
    )
    return await start_gateway(settings)


def backend_store(data_dir: Path, database_url: str | None) -> GatewayStore:
    """The store a `database_url` fixture names (None: SQLite in `data_dir`), not opened yet."""
    if database_url is None:
        return SqliteGatewayStore(data_dir / "gateway.db", timeout_seconds=5)
    return PostgresGatewayStore(
        database_url, timeout_seconds=5, poll_wait_us=GatewayConfig().postgres_poll_wait_us
    )


def gateway_settings(
    data_dir: Path, database_url: str | None = None, *, metrics_port: int | None = None, **gateway: Any
) -> EgbeSettings:
    settings = load_settings(data_dir=data_dir, database_url=database_url)
    endpoints = {**settings.endpoints, "gateway": Endpoint(port=0, metrics_port=metrics_port)}
    config = settings.gateway.model_copy(update=gateway)
    return settings.model_copy(update={"endpoints": endpoints, "gateway": config})


@asynccontextmanager
async def leased_gateway(
    folder: Path,
    database_url: str | None,
    *,
    cap: int,
    holder: str,
    clock: Callable[[], float] = time.time,
    **lease: Any,
) -> AsyncIterator[CognitionGateway]:
    """An in-process gateway over a real store, with its own lease holder id."""
    settings = gateway_settings(folder, database_url)
    config = settings.gateway.model_copy(
        update={
            "budget": BudgetConfig(world_cap_tokens_per_hour=cap),
            "lease": LeaseConfig(holder=holder, **lease),
        }
    )
    gateway = CognitionGateway(
        config, build_store(settings.model_copy(update={"gateway": config})), OfflineAdapter(), clock=clock
    )
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


@dataclass
class GatewayHarness:
    running: RunningService
    channel: grpc.aio.Channel
    tokens: dict[Role, str]

    def metadata(self, role: Role) -> tuple[tuple[str, str], ...]:
        return bearer_metadata(self.tokens[role])

    def metadata_operator(self) -> tuple[tuple[str, str], ...]:
        return bearer_metadata(self.tokens[Role.OPERATOR])

    @property
    def gateway(self) -> gateway_pb2_grpc.CognitionGatewayServiceStub:
        return gateway_pb2_grpc.CognitionGatewayServiceStub(self.channel)

    @property
    def operator(self) -> gateway_pb2_grpc.OperatorServiceStub:
        return gateway_pb2_grpc.OperatorServiceStub(self.channel)

    async def admit(
        self, ori: str, tier: int = CLOTHO, *, tenant: str = "tenant-a", world: str = "world-1"
    ) -> Any:
        return await self.gateway.AdmitRun(
            admit_request(ori, tier, tenant=tenant, world=world), metadata=self.metadata(Role.SERVICE)
        )

    async def select_route(self, tier: int) -> gateway_pb2.SelectModelRouteResponse:
        return await self.gateway.SelectModelRoute(
            gateway_pb2.SelectModelRouteRequest(tier=tier),  # type: ignore[arg-type]
            metadata=self.metadata(Role.OPERATOR),
        )

    async def generate(
        self, run_id: str, *, mode: int = gateway_pb2.COGNITION_MODE_DIALOGUE, **prompt: Any
    ) -> Any:
        return await self.gateway.Generate(
            generate_request(run_id, mode=mode, **prompt), metadata=self.metadata(Role.SERVICE)
        )

    async def run(
        self, ori: str, *, tier: int = CLOTHO, world: str = "world-1", request_id: str = "", **prompt: Any
    ) -> Any:
        """A fused run (`Run`): admit, one model call, end."""
        return await self.gateway.Run(
            run_request(ori, tier=tier, world=world, request_id=request_id, **prompt),
            metadata=self.metadata(Role.SERVICE),
        )

    async def end(self, run_id: str, outcome: int = gateway_pb2.RUN_OUTCOME_COMPLETED) -> Any:
        return await self.gateway.EndRun(
            gateway_pb2.EndRunRequest(run_id=run_id, outcome=outcome),  # type: ignore[arg-type]
            metadata=self.metadata(Role.SERVICE),
        )

    async def spend(self, world: str = "") -> gateway_pb2.GetSpendResponse:
        reply: gateway_pb2.GetSpendResponse = await self.operator.GetSpend(
            gateway_pb2.GetSpendRequest(world_id=world), metadata=self.metadata(Role.OPERATOR)
        )
        return reply

    async def audit_records(self, **filters: Any) -> list[gateway_pb2.AuditRecord]:
        records: list[gateway_pb2.AuditRecord] = []
        token = ""
        for _ in range(10_000):
            page = await self.operator.ListAuditRecords(
                gateway_pb2.ListAuditRecordsRequest(page_size=200, page_token=token, **filters),
                metadata=self.metadata(Role.OPERATOR),
            )
            records.extend(page.records)
            token = page.next_page_token
            if not token:
                return records
        raise AssertionError("audit pagination did not end")

    async def stop(self) -> None:
        await self.channel.close(grace=None)
        await self.running.stop()


def admit_request(
    ori: str, tier: int = CLOTHO, *, tenant: str = "tenant-a", world: str = "world-1", request_id: str = ""
) -> gateway_pb2.AdmitRunRequest:
    return gateway_pb2.AdmitRunRequest(
        ori=common_pb2.OriRef(tenant_id=tenant, world_id=world, ori_id=ori),
        tier=tier,  # type: ignore[arg-type]
        cause=CAUSE_FOR_TIER[tier],  # type: ignore[arg-type]
        request_id=request_id,
    )


def run_request(
    ori: str, *, tier: int = CLOTHO, world: str = "world-1", request_id: str = "", **prompt: Any
) -> gateway_pb2.RunRequest:
    """A fused run's request: the admission and its one model call."""
    return gateway_pb2.RunRequest(
        admit=admit_request(ori, tier, world=world, request_id=request_id),
        generate=generate_request("", **prompt),
    )


def generate_request(
    run_id: str, *, mode: int = gateway_pb2.COGNITION_MODE_DIALOGUE, **prompt: Any
) -> gateway_pb2.GenerateRequest:
    envelope = gateway_pb2.PromptEnvelope(
        system_policy=prompt.get("system_policy", "You are Ada, a baker. Stay in character."),
        task_instruction=prompt.get("task_instruction", "Objective: open the bakery\nSpeaker: Bram"),
        tool_grants=prompt.get("tool_grants", ()),
        untrusted=[
            gateway_pb2.UntrustedZone(
                kind=gateway_pb2.UNTRUSTED_ZONE_KIND_STEWARD_INPUT,
                content=prompt.get("heard", "Bram (Bram) says: Will you open the bakery today?"),
            ),
            gateway_pb2.UntrustedZone(
                kind=gateway_pb2.UNTRUSTED_ZONE_KIND_RECALLED_MEMORY,
                content=prompt.get("memory", "[mem-7] Bram lent me flour last winter."),
            ),
        ],
    )
    return gateway_pb2.GenerateRequest(run_id=run_id, mode=mode, prompt=envelope)  # type: ignore[arg-type]


async def record_route_scores(settings: EgbeSettings, score_bp: int = 10_000) -> None:
    """Record `score_bp` for every target of each tier's selected class on the tier's suite, through the
    store API: the evidence a gateway on a model (not the offline adapter) needs to start. Unit tests use
    this; end-to-end tests run `egbe eval` itself."""
    config = settings.gateway
    now_ms = int(time.time() * 1000)
    scores = []
    for tier in TIER_NAMES:
        route = config.routing.route_for(tier)
        suite = load_suite(route.eval_suite)
        scores += [
            EvalScore(
                t.provider,
                t.model_id,
                suite.name,
                suite.version,
                score_bp,
                len(suite.cases),
                score_bp,
                10_000,
                offline=False,
                recorded_at_ms=now_ms,
            )
            for t in route_targets(config.routing, route.selected_model_class)
        ]
    store = build_store(settings)
    await store.open()
    try:
        await store.record_eval_scores(scores, operator_id="tests")
    finally:
        await store.close()


async def start_gateway(settings: EgbeSettings, *, record_scores: bool = True) -> GatewayHarness:
    """A gateway bundle served on port 0; with `record_scores`, when a model answers (no scores apply to
    the offline adapter), passing scores recorded for its routes first (`record_route_scores`)."""
    if record_scores and not build_adapter(settings.gateway).offline:
        await record_route_scores(settings)
    tokens = {role: secrets.token_urlsafe(24) for role in Role}
    store = TokenStore({role: [token] for role, token in tokens.items()})
    bundle = await build_bundle(settings, store)
    running = await start_service(bundle, settings.endpoints["gateway"], store, settings)
    return GatewayHarness(running, grpc.aio.insecure_channel(running.target), tokens)


def write_tokens_file(folder: Path) -> tuple[Path, dict[str, str]]:
    """A tokens file (EGBE_TOKENS_FILE) for gateway processes, and the token of each role."""
    tokens = {role: secrets.token_urlsafe(24) for role in ("service", "operator", "world")}
    tokens_file = folder / "tokens.json"
    tokens_file.write_text(json.dumps(tokens))
    tokens_file.chmod(0o600)
    return tokens_file, tokens


def serve_gateway_process(
    data_dir: Path, tokens_file: Path, dsn: str | None, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """A real `egbe serve gateway` process (PostgreSQL when `dsn` is set, else SQLite under data_dir)."""
    database = {"EGBE_DATABASE_URL": dsn} if dsn else {}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assembly.cli",
            "--data-dir",
            str(data_dir),
            "serve",
            "gateway",
            "--ephemeral-ports",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            **env,
            **database,
            "EGBE_TOKENS_FILE": str(tokens_file),
            "EGBE_LOG_FORMAT": "json",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def process_target(process: subprocess.Popen[bytes], data_dir: Path) -> str:
    for _ in range(600):
        endpoints = data_dir / "endpoints.json"
        if endpoints.is_file():
            published = json.loads(endpoints.read_text())
            if published.get("pid") == process.pid:
                return str(published["gateway"])
        assert process.poll() is None, "the gateway process exited"
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway process did not publish its endpoint")
