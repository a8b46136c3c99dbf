"""The files of a run folder (runs/<run-id>/), named in one place."""

from __future__ import annotations

ARTIFACT_FILE = "artifact.json"
REPORT_FILE = "report.html"
RESULT_LOG_FILE = "results.bin"  # every TickResult the kernel answered, deflated frames
TICK_LOG_FILE = "tick-log.bin"  # the kernel's own tick log
SNAPSHOT_DIR = "snapshots"
SERVICES_DIR = "services"  # the embedded services' data (SQLite, tokens) of this run
