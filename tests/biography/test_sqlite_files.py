"""The embedded SQLite log holds every Ori's life: its files are the owner's alone, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from biography_service.events import NO_STREAM
from biography_service.store.sqlite import SqliteStore
from tests.biography.events_for_tests import memories


@pytest.fixture
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("usual_umask")
async def test_the_database_and_its_wal_are_created_owner_only_in_an_owner_only_directory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data" / "biography.sqlite3"
    store = SqliteStore(path, max_group=8)
    await store.open()
    try:
        await store.append("ori-a", NO_STREAM, memories(2))
        assert (await store.read_stream("ori-a", 0, 10))[1].stream_version == 1
        files = {p.name: _mode(p) for p in path.parent.iterdir()}
    finally:
        await store.close()
    assert files == {
        "biography.sqlite3": 0o600,
        "biography.sqlite3-wal": 0o600,
        "biography.sqlite3-shm": 0o600,
    }
    assert _mode(path.parent) == 0o700


@pytest.mark.usefixtures("usual_umask")
async def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "biography.sqlite3"
    store = SqliteStore(path, max_group=8)
    await store.open()
    await store.append("ori-a", NO_STREAM, memories(1))
    await store.close()
    path.chmod(0o640)
    reopened = SqliteStore(path, max_group=8)
    await reopened.open()
    try:
        assert [e.stream_version for e in await reopened.read_stream("ori-a", 0, 10)] == [0]
    finally:
        await reopened.close()
    assert _mode(path) == 0o640
