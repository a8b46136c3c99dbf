"""A TCP relay on loopback that can fall silent: a network partition, as a PostgreSQL client sees it.

A server that is down refuses connections or resets them, and every client notices at once. A partition
(a host gone without a reset, a firewall dropping packets, a server that stops reading) closes nothing:
bytes sent are accepted and never answered. `silence()` does that to every connection relayed so far,
while new connections relay as usual (the partition has healed for whoever reconnects), unless it is told
`later_too`: then every connection falls silent as it opens, until `heal()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg


class SilentRelay:
    def __init__(self, server_host: str, server_port: int) -> None:
        self._server = (server_host, server_port)
        self._listener: asyncio.Server | None = None
        self._silenced: list[asyncio.Event] = []
        self._silent = False  # (new connections too)
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._listener = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._listener.sockets[0].getsockname()[1]

    def dsn(self, server_dsn: str) -> str:
        """`server_dsn` with its host and port replaced by the relay's."""
        info = psycopg.conninfo.conninfo_to_dict(server_dsn)
        info.update(host="127.0.0.1", port=str(self.port))
        return psycopg.conninfo.make_conninfo("", **info)

    def silence(self, *, later_too: bool = False) -> None:
        """Stop relaying on every connection open now (and with `later_too`, on every one opened until
        `heal`); their sockets stay open."""
        self._silent = later_too
        for silenced in self._silenced:
            silenced.set()

    def heal(self) -> None:
        """New connections relay again (the silenced ones stay silent)."""
        self._silent = False

    @property
    def connections(self) -> int:
        return len(self._silenced)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        host, port = self._server
        if host.startswith("/"):  # (libpq's Unix socket directory)
            server_in, server_out = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            server_in, server_out = await asyncio.open_connection(host, port)
        silenced = asyncio.Event()
        if self._silent:
            silenced.set()
        self._silenced.append(silenced)
        for source, sink in ((client_in, server_out), (server_in, client_out)):
            pump = asyncio.create_task(self._pump(source, sink, silenced))
            self._pumps.add(pump)

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, silenced: asyncio.Event
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if silenced.is_set():
                    await _forever()  # (holding both sockets open: nothing is closed or refused)
                sink.write(chunk)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            sink.close()


async def _forever() -> None:
    await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def relayed(server_dsn: str) -> AsyncIterator[tuple[SilentRelay, str]]:
    """A relay to the server of `server_dsn`, and the DSN that reaches the same database through it."""
    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    relay = SilentRelay(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
    await relay.start()
    try:
        yield relay, relay.dsn(server_dsn)
    finally:
        await relay.close()
