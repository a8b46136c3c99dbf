"""Starting the gateway: bad config is refused whole; runs time out; telemetry and retry stats."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from assembly.settings import load_settings
from egbe.v1 import gateway_pb2
from gateway.config import GatewayConfig, RoutingConfig, TierRoute
from gateway.errors import RunStopped
from gateway.server import build_gateway
from services.auth import Role
from services.errors import InvalidArgument
from services.settings import UserError
from tests.gateway.harness import GatewayHarness, gateway_settings, start_gateway


async def test_a_config_selecting_an_unknown_class_is_refused_before_anything_opens(tmp_path: Path) -> None:
    routing = RoutingConfig(
        lachesis=TierRoute(
            eval_suite="offscreen-reflection-coherence",
            required_quality_bp=9_000,
            selected_model_class="gpt-class",
        )
    )
    settings = gateway_settings(tmp_path, routing=routing)
    with pytest.raises(InvalidArgument) as refused:
        await build_gateway(settings)
    assert refused.value.violations[0].field == "routing.lachesis.selected_model_class"
    assert not (tmp_path / "gateway.sqlite3").exists()  # refused before the store was touched


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        (
            "[gateway.run_budgets.clotho]\nmax_model_calls = -1\nmax_tool_calls = 2\nmax_tokens = 4000\n",
            "max_model_calls",
        ),
        ("[gateway]\nno_such_setting = 1\n", "no_such_setting"),
        ("[gateway.budget]\nworld_cap_tokens_per_hour = 0\n", "world_cap_tokens_per_hour"),
        ("[gateway]\npostgres_poll_wait_us = -1\n", "postgres_poll_wait_us"),
        ("[gateway]\npostgres_poll_wait_us = 100001\n", "postgres_poll_wait_us"),
    ],
)
def test_malformed_gateway_config_names_the_field(tmp_path: Path, toml: str, field: str) -> None:
    path = tmp_path / "egbe.toml"
    path.write_text(toml)
    with pytest.raises(UserError) as refused:
        load_settings(config_file=path)
    assert str(refused.value).startswith(f"config file {path}: ")
    assert f"gateway.{field}" in str(refused.value) or f".{field} = " in str(refused.value)


def test_gateway_config_is_reachable_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR", "1000")
    assert load_settings().gateway.budget.world_cap_tokens_per_hour == 1_000
    assert GatewayConfig().budget.world_cap_tokens_per_hour == 96_000_000


async def test_a_run_never_ended_times_out_and_releases_its_reservation(tmp_path: Path) -> None:
    harness = await start_gateway(
        gateway_settings(tmp_path, run_timeout_seconds=0.05, sweep_interval_seconds=0.05)
    )
    try:
        await harness.admit("ada")
        for _ in range(200):
            if (await harness.spend()).reserved_tokens == 0:
                break
            await asyncio.sleep(0.05)
        assert (await harness.spend()).reserved_tokens == 0
    finally:
        await harness.stop()


async def test_retry_stats_roll_up_ended_runs(gateway: GatewayHarness) -> None:
    for ori in ("ada", "bram"):
        run = await gateway.admit(ori)
        await gateway.generate(run.run_id)
        await gateway.end(run.run_id, gateway_pb2.RUN_OUTCOME_FALLBACK)
    reply = await gateway.operator.GetRetryStats(
        gateway_pb2.GetRetryStatsRequest(), metadata=gateway.metadata(Role.OPERATOR)
    )
    stats = json_format.MessageToDict(reply.stats)
    assert stats["runCount"] == 2
    assert stats["schemas"]["dialogue"]["calls"] == 2
    assert stats["schemas"]["dialogue"]["fallbacks"] == 2
    assert stats["providerErrors"]["total"] == 0


async def test_metrics_count_tokens_admissions_and_kills(tmp_path: Path) -> None:
    settings = gateway_settings(tmp_path)
    gateway = await build_gateway(settings)
    try:
        from gateway.adapters.base import ModelRequest
        from gateway.records import ControlKind, ControlScope
        from gateway.runs import Who

        admitted = await gateway.admit(Who("t", "w", "ada"), 1, 1)
        await gateway.generate(admitted.run.run_id, ModelRequest("p", "Objective: x", mode="dialogue"))
        await gateway.add_control(ControlKind.KILL, ControlScope.ORI, "ada", reason="r", operator_id="o")
        with pytest.raises(RunStopped):  # the kill stops the run at its next model boundary
            await gateway.generate(admitted.run.run_id, ModelRequest("p", "Objective: x", mode="dialogue"))
        text = gateway.metrics.exposition().decode()
    finally:
        await gateway.stop()
    assert 'egbe_gateway_admissions_total{tier="clotho"} 1.0' in text
    # One control committed; the run it stopped is counted apart from it.
    assert 'egbe_gateway_controls_total{scope="ori"} 1.0' in text
    assert 'egbe_gateway_runs_stopped_total{scope="ori"} 1.0' in text
    assert 'egbe_gateway_model_calls_total{model="offline:deterministic-v1",tier="clotho"} 1.0' in text
    assert json.dumps("egbe_gateway_tokens_total")[1:-1] in text
