"""A PostgreSQL server of the test's own (initdb into a temporary directory), so a test may stop it.

The machine's shared server backs every other PostgreSQL test; stopping it would break them. This
one listens on a free loopback port and a socket directory of its own, and is stopped and started
with `pg_ctl` as production stops a database: connections are cut, new ones are refused.
PostgreSQL refuses to run as root, so under root (CI) every command runs as the `postgres` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from services.local_cluster import free_ports


def postgres_bin_dir() -> Path | None:
    """Where `initdb` and `pg_ctl` are: Debian's versioned directory, else PATH; None if neither."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "pg_ctl").is_file() and Path(candidate, "initdb").is_file():
            return Path(candidate)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found and shutil.which("initdb") else None


class PrivatePostgres:
    """One throwaway cluster: `start()`, `stop()` (fast shutdown), `start()` again, `destroy()`."""

    def __init__(self, bin_dir: Path) -> None:
        self._bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="egbe-private-pg-"))
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.data = self.root / "data"
        (self.port,) = free_ports(1)
        try:
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [*self._as_user, str(self._bin / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        """Start on the same port every time and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start"
        )

    def stop(self) -> None:
        """Fast shutdown: open sessions are terminated, then the server exits."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
