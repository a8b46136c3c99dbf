"""Who can read what a service keeps: owner-only data directory, databases and tokens, and metrics
exposed only as far as the service's own endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import stat
import urllib.request
from pathlib import Path

import pytest

from assembly.launcher import start_services, stop_services
from assembly.settings import load_settings
from services.files import create_private_file, private_dir
from services.runtime import load_tokens
from services.settings import SERVICE_NAMES, Endpoint, Mode, UserError

TOKENS = {"world": "w" * 24, "service": "s" * 24, "operator": "o" * 24}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _tokens_file(folder: Path, mode: int) -> Path:
    path = folder / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_production_refuses_a_tokens_file_others_can_read(tmp_path: Path, mode: int) -> None:
    path = _tokens_file(tmp_path, mode)
    settings = load_settings(mode=Mode.PRODUCTION, tokens_file=path, data_dir=tmp_path)
    with pytest.raises(UserError) as refused:
        load_tokens(settings)
    assert str(refused.value) == (
        f"EGBE_TOKENS_FILE: tokens file {path} can be read or written by others (mode {mode:04o}); "
        f"chmod 600 {path}"
    )


def test_production_accepts_an_owner_only_tokens_file(tmp_path: Path) -> None:
    path = _tokens_file(tmp_path, 0o600)
    tokens = load_tokens(load_settings(mode=Mode.PRODUCTION, tokens_file=path, data_dir=tmp_path))
    assert tokens.principal_of(f"Bearer {TOKENS['operator']}").token_id.startswith("operator:")


def test_private_files_and_the_journals_sqlite_makes_beside_them_are_owner_only(tmp_path: Path) -> None:
    folder = private_dir(tmp_path / "data" / "state")
    assert _mode(folder) == 0o700
    database = create_private_file(folder / "store.sqlite3")
    with sqlite3.connect(database) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE t (x)")
        connection.execute("INSERT INTO t VALUES (1)")
        made = sorted(path.name for path in folder.iterdir())
        assert made == ["store.sqlite3", "store.sqlite3-shm", "store.sqlite3-wal"]
        assert {name: _mode(folder / name) for name in made} == dict.fromkeys(made, 0o600)
    create_private_file(database)  # an existing database is opened, never emptied
    assert sqlite3.connect(database).execute("SELECT x FROM t").fetchall() == [(1,)]


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as scraped:  # noqa: S310 - an http URL built here
        body: bytes = scraped.read()
    return body


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_services_create_their_data_dir_owner_only_and_bind_metrics_where_they_listen(
    tmp_path: Path,
) -> None:
    metrics_port = _free_port()
    settings = load_settings(
        data_dir=tmp_path / "data",
        endpoints={
            name: Endpoint(host="127.0.0.2", port=0, metrics_port=metrics_port if name == "kernel" else None)
            for name in SERVICE_NAMES
        },
    )
    running = await start_services(["kernel"], settings)
    try:
        assert _mode(tmp_path / "data") == 0o700
        assert _mode(tmp_path / "data" / "tokens.json") == 0o600
        assert running[0].target.startswith("127.0.0.2:")
        with socket.socket() as elsewhere:
            assert elsewhere.connect_ex(("127.0.0.1", metrics_port)) != 0
        assert b"egbe_kernel" in await asyncio.to_thread(_scrape, f"http://127.0.0.2:{metrics_port}/metrics")
    finally:
        await stop_services(running, settings)
