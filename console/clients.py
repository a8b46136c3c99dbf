"""The console's gRPC clients: the gateway's OperatorService and the biography, dialled through the
chassis (TLS or mTLS as the settings say), every call carrying the token of whoever it is made for."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from egbe.v1 import biography_pb2, biography_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from services.channels import open_channel
from services.settings import ChassisSettings

# The gateway records the name in this metadata on every operator attempt, as it does for `egbe ops`
# (which sends $USER): a control from the console is audited under the signed-in operator's name.
OPERATOR_NAME_METADATA = "x-egbe-operator"
# Asks the gateway to audit a caller's reads once a window (gateway/read_audit.py says the same names).
AUDIT_METADATA, WINDOWED = "x-egbe-audit", "windowed"
# The name the console's own shared reads are audited under.
CONSOLE_READER_NAME = "console"
RPC_TIMEOUT_SECONDS = 5.0
PAGE_SIZE_MAX = 1_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


def valid_name(name: str) -> bool:
    """An operator or viewer name: 1-64 letters, digits, `.`, `_`, `@` or `-`."""
    return bool(_NAME.match(name))


@dataclass(frozen=True)
class Caller:
    """Whose token a call carries, and the name the gateway audits it under."""

    name: str
    token: str = field(repr=False)
    # Reads the gateway audits once a window, not a row each (the poll loop's: gateway/read_audit.py).
    windowed: bool = False

    def metadata(self) -> tuple[tuple[str, str], ...]:
        named = (*bearer_metadata(self.token), (OPERATOR_NAME_METADATA, self.name))
        return (*named, (AUDIT_METADATA, WINDOWED)) if self.windowed else named


class SignInRefused(Exception):
    """The gateway did not take the token as an operator's (or could not be asked)."""


@dataclass
class ConsoleClients:
    """One channel to the gateway's OperatorService and one to the biography, shared by every page."""

    operator: gateway_pb2_grpc.OperatorServiceAsyncStub
    biography: biography_pb2_grpc.BiographyServiceAsyncStub
    channels: list[grpc.aio.Channel]
    reader: Caller  # the console's own operator token, for reads only: never for a control

    @classmethod
    def dial(
        cls, operator_target: str, biography_target: str, settings: ChassisSettings, reader_token: str
    ) -> ConsoleClients:
        operator = open_channel(operator_target, settings)
        biography = open_channel(biography_target, settings)
        return cls(
            operator=gateway_pb2_grpc.OperatorServiceStub(operator),
            biography=biography_pb2_grpc.BiographyServiceStub(biography),
            channels=[operator, biography],
            reader=Caller(CONSOLE_READER_NAME, reader_token, windowed=True),
        )

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(grace=None)

    async def check_operator(self, caller: Caller) -> None:
        """Ask the gateway whether `caller`'s token is an operator's, with an operator-only read (so the
        sign-in is itself an audited operator attempt, and a refused one an audited refusal)."""
        try:
            await self.operator.ListOperatorAttempts(
                gateway_pb2.ListOperatorAttemptsRequest(page_size=1, operator_id=caller.name),
                metadata=caller.metadata(),
                timeout=RPC_TIMEOUT_SECONDS,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise SignInRefused("the gateway does not know this token as an operator's") from error
            raise SignInRefused(f"the gateway could not be asked: {error.code().name}") from error

    async def worlds(self, caller: Caller) -> list[gateway_pb2.WorldSpend]:
        """Every world the gateway's ledger knows, every page."""

        async def page(token: str) -> tuple[list[gateway_pb2.WorldSpend], str]:
            reply = await self.operator.ListWorlds(
                gateway_pb2.ListWorldsRequest(page_size=PAGE_SIZE_MAX, page_token=token),
                metadata=caller.metadata(),
                timeout=RPC_TIMEOUT_SECONDS,
            )
            return list(reply.worlds), reply.next_page_token

        return await _every_page(page)

    async def controls(self, caller: Caller, include_inactive: bool = False) -> list[gateway_pb2.Control]:
        async def page(token: str) -> tuple[list[gateway_pb2.Control], str]:
            reply = await self.operator.ListControls(
                gateway_pb2.ListControlsRequest(
                    include_inactive=include_inactive, page_size=PAGE_SIZE_MAX, page_token=token
                ),
                metadata=caller.metadata(),
                timeout=RPC_TIMEOUT_SECONDS,
            )
            return list(reply.controls), reply.next_page_token

        return await _every_page(page)

    async def audit_page(
        self, caller: Caller, request: gateway_pb2.ListAuditRecordsRequest
    ) -> gateway_pb2.ListAuditRecordsResponse:
        response: gateway_pb2.ListAuditRecordsResponse = await self.operator.ListAuditRecords(
            request, metadata=caller.metadata(), timeout=RPC_TIMEOUT_SECONDS
        )
        return response

    async def audit_records(
        self, caller: Caller, request: gateway_pb2.ListAuditRecordsRequest
    ) -> AsyncIterator[gateway_pb2.AuditRecord]:
        """Every record the request's filter matches, oldest first, page after page."""
        paged = gateway_pb2.ListAuditRecordsRequest()
        paged.CopyFrom(request)
        while True:
            page = await self.audit_page(caller, paged)
            for record in page.records:
                yield record
            if not page.next_page_token:
                return
            paged.page_token = page.next_page_token

    async def attempts_page(
        self, caller: Caller, request: gateway_pb2.ListOperatorAttemptsRequest
    ) -> gateway_pb2.ListOperatorAttemptsResponse:
        response: gateway_pb2.ListOperatorAttemptsResponse = await self.operator.ListOperatorAttempts(
            request, metadata=caller.metadata(), timeout=RPC_TIMEOUT_SECONDS
        )
        return response

    async def identity(self, caller: Caller, ori_id: str) -> biography_pb2.RehydrateResponse:
        response: biography_pb2.RehydrateResponse = await self.biography.Rehydrate(
            biography_pb2.RehydrateRequest(ori_id=ori_id),
            metadata=caller.metadata(),
            timeout=RPC_TIMEOUT_SECONDS,
        )
        return response

    async def timeline(
        self, caller: Caller, ori_id: str, page_token: str, page_size: int
    ) -> biography_pb2.ReadResponse:
        """One page of the Ori's biography, in stream order."""
        response: biography_pb2.ReadResponse = await self.biography.Read(
            biography_pb2.ReadRequest(
                ori_id=ori_id,
                page_size=page_size,
                page_token=page_token,
                direction=biography_pb2.READ_DIRECTION_FORWARD,
            ),
            metadata=caller.metadata(),
            timeout=RPC_TIMEOUT_SECONDS,
        )
        return response


Item = TypeVar("Item")


async def _every_page(page: Callable[[str], Awaitable[tuple[list[Item], str]]]) -> list[Item]:
    """Every item of a paged list RPC: `page(token)` answers a page and the next token ("" at the end)."""
    items: list[Item] = []
    token = ""
    while True:
        found, token = await page(token)
        items.extend(found)
        if not token:
            return items
