"""Opens report.html in headless Chromium (Debian's), checks the charts rendered, keeps a screenshot."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.conftest import chromium_path
from tests.world.recorded_run import recorded_artifact
from world.report import write_report

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",
]


def test_charts_render_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    write_report(recorded_artifact(), page)
    chromium = chromium_path()
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    expected = re.search(r'data-charts-expected="(\d+)"', dom)
    rendered = re.search(r'data-charts-rendered="(\d+)"', dom)
    assert expected is not None, "the page's chart check did not run"
    assert rendered is not None
    assert int(expected.group(1)) == 7
    assert rendered.group(1) == expected.group(1)
    shots = Path(os.environ.get("EGBE_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    screenshot = shots / "report.png"
    subprocess.run(
        [chromium, *CHROMIUM_FLAGS, "--window-size=900,3200", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 20_000  # a blank page is a few kB; charts are far more
