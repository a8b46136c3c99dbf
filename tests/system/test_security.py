"""Role boundaries over real gRPC: world servers cannot operate or write biographies, operators
cannot stream ticks, and nobody without a token gets past authentication.

The expectations are the issue's rules written out here, not read back from METHOD_ROLES.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from services.auth import Role, bearer_metadata
from tests.conftest import EmbeddedEgbe
from tests.system.rpc_catalogue import Outcome, Rpc, all_rpcs, call

RPCS = {str(rpc): rpc for rpc in all_rpcs()}
OPERATOR_RPCS = sorted(name for name in RPCS if name.startswith("OperatorService."))
# The reads a world server makes (its progress line polls the spend): open to the world role too.
WORLD_READS = ["OperatorService.GetSpend", "OperatorService.ListControls", "OperatorService.ListWorlds"]
BIOGRAPHY_WRITES = ["BiographyService.Append", "BiographyService.Consolidate"]
TICK_PATH = ["KernelService.StreamTicks", "KernelService.Tick", "KernelService.RegisterAgents"]
AUTH_REFUSALS = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}


@pytest.fixture(scope="module")
def channels(adversarial_egbe: EmbeddedEgbe) -> Iterator[dict[str, grpc.Channel]]:
    opened = {name: grpc.insecure_channel(target) for name, target in adversarial_egbe.targets.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def _call_as(channels: dict[str, grpc.Channel], egbe: EmbeddedEgbe, rpc: Rpc, role: Role | None) -> Outcome:
    metadata = bearer_metadata(egbe.tokens[role.value]) if role is not None else ()
    return call(channels[rpc.egbe_service], rpc, [rpc.request_class()], metadata, timeout=10)


@pytest.mark.parametrize("name", [n for n in OPERATOR_RPCS if n not in WORLD_READS] + BIOGRAPHY_WRITES)
def test_world_token_cannot_operate_or_write_biographies(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], Role.WORLD)
    assert outcome.code == grpc.StatusCode.PERMISSION_DENIED, outcome


@pytest.mark.parametrize("name", TICK_PATH)
def test_operator_token_cannot_drive_the_tick_path(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], Role.OPERATOR)
    assert outcome.code == grpc.StatusCode.PERMISSION_DENIED, outcome


@pytest.mark.parametrize("name", WORLD_READS)
def test_world_token_reaches_the_reads_a_world_server_makes(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], Role.WORLD)
    assert outcome.code not in AUTH_REFUSALS, outcome


@pytest.mark.parametrize("name", TICK_PATH)
def test_world_token_reaches_the_tick_path(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], Role.WORLD)
    assert outcome.code not in AUTH_REFUSALS, outcome


@pytest.mark.parametrize("name", OPERATOR_RPCS)
def test_operator_token_reaches_operator_service(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], Role.OPERATOR)
    assert outcome.code not in AUTH_REFUSALS, outcome


@pytest.mark.parametrize("name", sorted(RPCS))
def test_no_token_is_unauthenticated_everywhere(
    name: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    outcome = _call_as(channels, adversarial_egbe, RPCS[name], None)
    assert outcome.code == grpc.StatusCode.UNAUTHENTICATED, outcome


def test_a_token_of_another_deployment_is_unauthenticated(
    channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    rpc = RPCS["KernelService.StreamTicks"]
    foreign = bearer_metadata("a-world-token-from-some-other-deployment")
    outcome = call(channels["kernel"], rpc, [rpc.request_class()], foreign, timeout=10)
    assert outcome.code == grpc.StatusCode.UNAUTHENTICATED
