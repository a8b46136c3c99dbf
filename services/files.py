"""Files only the service's own user may read: the data directory, SQLite databases, tokens.

A secret or a database made world-readable by a default umask is readable by every account on the
host; these functions create such files owner-only from the start and refuse secrets others can read.
"""

from __future__ import annotations

import os
from pathlib import Path

OWNER_ONLY_DIR = 0o700
OWNER_ONLY_FILE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) owner-only; a directory that already exists is kept as it is."""
    path.mkdir(mode=OWNER_ONLY_DIR, parents=True, exist_ok=True)
    return path


def create_private_file(path: Path) -> Path:
    """Create `path` empty and owner-only (0600) unless it exists, before a database opens it.

    SQLite creates a database's journal, WAL and shared-memory files with the database file's own
    mode, so they are owner-only too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, OWNER_ONLY_FILE)
    os.close(fd)
    return path


def refuse_shared_secret(path: Path, what: str) -> None:
    """Raise PermissionError when a secret file can be read or written by anyone but its owner.

    One case passes: a file owned by another user and readable by its group alone, which is how an
    orchestrator mounts a secret for a non-root process (Kubernetes: `defaultMode: 0440` read
    through the pod's fsGroup); this process could not make it 0600 and no other account reads it.
    """
    info = path.stat()
    mode = info.st_mode & 0o777
    shared = mode & 0o077
    if shared == 0 or (shared == 0o040 and info.st_uid != os.getuid()):
        return
    raise PermissionError(
        f"{what} {path} can be read or written by others (mode {mode:04o}); chmod 600 {path}"
    )
