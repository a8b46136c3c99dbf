"""`egbe replay`: re-runs a run's tick log through a fresh kernel and names the first divergent field."""

from __future__ import annotations

import hashlib
from pathlib import Path

from services.errors import NotBuilt
from services.settings import EgbeSettings
from world.artifact import ReplayCheck
from world.framing import raw_frames


def tick_log_summary(path: Path) -> tuple[str, int]:
    """SHA-256 of the log file and how many frames it holds (framing checked, frames not decoded)."""
    digest = hashlib.sha256()
    frames = 0
    for data in raw_frames(path):
        digest.update(data)
        frames += 1
    return digest.hexdigest(), frames


async def replay_run(run_dir: Path, settings: EgbeSettings) -> ReplayCheck:
    raise NotBuilt("egbe replay: needs the kernel's tick log on main (issue #3)")
