"""A snapshot of what every stateful Egbe service holds, read over its own RPCs, so a test can show
that a refused request changed nothing: the kernel's agents in the seeded world, the gateway's
ledger and controls, and the biography's event log.

Reads only. The operator reads are audited (each attempt is an audit row); that audit trail is not
part of the snapshot, since recording who read is the point of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
)
from services.auth import bearer_metadata

# The world and Ori ids the message strategies draw among their strings, so fuzzed requests reach them.
SEEDED_WORLD = "world-1"
SEEDED_ORI = "ori-1"
# The seeded world's agents plus a few slots beyond them (a half-applied registration would fill those).
KERNEL_SLOTS = 8
PAGE = 500
MAX_PAGES = 1000


@dataclass(frozen=True)
class State:
    kernel_agents: tuple[str, ...]
    spend: bytes
    controls: tuple[bytes, ...]
    biography_head: int


class StateProbe:
    """Takes snapshots; keeps its place in the biography's `$all` log so each one reads only what is new."""

    def __init__(self, channels: dict[str, grpc.Channel], tokens: dict[str, str]) -> None:
        self._kernel = kernel_pb2_grpc.KernelServiceStub(channels["kernel"])
        self._operator = gateway_pb2_grpc.OperatorServiceStub(channels["gateway"])
        self._biography = biography_pb2_grpc.BiographyServiceStub(channels["biography"])
        self._world = bearer_metadata(tokens["world"])
        self._operator_md = bearer_metadata(tokens["operator"])
        self._service = bearer_metadata(tokens["service"])
        self._next_position = 0

    def snapshot(self) -> State:
        return State(self._kernel_agents(), self._spend(), self._controls(), self._biography_head())

    def _kernel_agents(self) -> tuple[str, ...]:
        agents = []
        for slot in range(KERNEL_SLOTS):
            try:
                reply = self._kernel.GetAgentState(
                    kernel_pb2.GetAgentStateRequest(world_id=SEEDED_WORLD, slot=slot),
                    metadata=self._world,
                    timeout=10,
                )
            except grpc.RpcError as error:
                agents.append(error.code().name)  # type: ignore[attr-defined]
            else:
                agents.append(reply.SerializeToString(deterministic=True).hex())
        return tuple(agents)

    def _spend(self) -> bytes:
        reply = self._operator.GetSpend(gateway_pb2.GetSpendRequest(), metadata=self._operator_md, timeout=10)
        return reply.SerializeToString(deterministic=True)

    def _controls(self) -> tuple[bytes, ...]:
        controls: list[bytes] = []
        token = ""
        for _ in range(MAX_PAGES):
            page = self._operator.ListControls(
                gateway_pb2.ListControlsRequest(include_inactive=True, page_size=PAGE, page_token=token),
                metadata=self._operator_md,
                timeout=10,
            )
            controls.extend(c.SerializeToString(deterministic=True) for c in page.controls)
            token = page.next_page_token
            if not token:
                break
        return tuple(controls)

    def _biography_head(self) -> int:
        """The global position after the last event of `$all` (every Ori's stream, in commit order)."""
        for _ in range(MAX_PAGES):
            request = biography_pb2.ReadRequest(ori_id="$all", page_size=PAGE)
            setattr(request, "from", self._next_position)  # `from` is a Python keyword
            page = self._biography.Read(request, metadata=self._service, timeout=10)
            if not page.events:
                break
            self._next_position = page.events[-1].global_position + 1
        return self._next_position
