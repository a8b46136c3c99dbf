"""`egbe fork`: resumes a run from its snapshot at a tick under another config and compares the bills."""

from __future__ import annotations

from pathlib import Path

from services.errors import NotBuilt
from services.settings import EgbeSettings


async def fork_run(
    run_dir: Path, at_tick: int, config: Path, settings: EgbeSettings, progress: bool = True
) -> str:
    raise NotBuilt("egbe fork: needs kernel snapshots on main (issue #3)")
