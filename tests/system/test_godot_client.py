"""The engine boundary over WebSockets: the Godot addon's headless sample (clients/godot), run by
Debian's headless Godot 3 (`godot3-server`) against a real `egbe up` through its edge, registers five
Ori, streams perception at 20 Hz, speaks to one and hears its reply."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, EmbeddedEgbe, start_embedded, stop_embedded

GODOT = shutil.which("godot3-server")
PROJECT = ROOT / "clients" / "godot"

pytestmark = pytest.mark.skipif(
    GODOT is None,
    reason="GODOT3-SERVER IS NOT INSTALLED: the Godot client is not tested; "
    "scripts/install_system_deps.sh installs it (apt-get install godot3-server)",
)


@pytest.fixture(scope="module")
def village_egbe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    """Its own `egbe up`: a kernel serves one world, the first one registered."""
    egbe = start_embedded(tmp_path_factory.mktemp("egbe-godot"))
    yield egbe
    assert stop_embedded(egbe) == 0


def run_sample(egbe: EmbeddedEgbe, home: Path) -> tuple[int, list[dict[str, Any]], str]:
    """Run the sample scene headless; its exit code, its "EGBE <json>" lines and everything it printed."""
    assert GODOT is not None
    result = subprocess.run(
        [GODOT, "--no-window", "--path", str(PROJECT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),  # Godot keeps its user data under HOME; never the developer's
            "EGBE_EDGE_URL": f"http://{egbe.http['edge']}",
            "EGBE_TOKEN": egbe.tokens["world"],
            "EGBE_WORLD": "godot-village",
        },
    )
    output = result.stdout + result.stderr
    lines = [
        json.loads(line[len("EGBE ") :]) for line in result.stdout.splitlines() if line.startswith("EGBE ")
    ]
    return result.returncode, lines, output


def test_the_godot_sample_hears_the_ori_it_spoke_to(village_egbe: EmbeddedEgbe, tmp_path: Path) -> None:
    code, lines, output = run_sample(village_egbe, tmp_path)
    assert code == 0, output[-4000:]
    events = [line["event"] for line in lines]
    assert events[0] == "registered", output[-4000:]
    slots = lines[0]["slots"]
    assert sorted(slots.values()) == [0, 1, 2, 3, 4]
    assert lines[0]["registered_total"] == 5
    [spoke] = [line for line in lines if line["event"] == "spoke"]
    assert (spoke["tick"], spoke["ori_id"], spoke["slot"]) == (20, "kunle", slots["kunle"])
    # Every tick answered, once, in order, from the first to the last sent.
    done = lines[-1]
    assert done["event"] == "done", output[-4000:]
    answered = [line["tick"] for line in lines if line["event"] == "answered"]
    assert answered == list(range(1, done["ticks_sent"] + 1))
    assert (done["ok"], done["ticks_answered"], done["out_of_order"]) == (True, len(answered), 0)
    # The reply: Kunle's, to the player, naming the tick the line was said on, after it.
    [reply] = [line for line in lines if line["event"] == "reply"]
    assert (reply["ori_id"], reply["slot"]) == ("kunle", slots["kunle"])
    assert (reply["addressed_to"], reply["heard_tick"]) == ("player-1", 20)
    assert reply["tick"] > 20
    assert reply["source"] == "offline"  # no model key in a test: the gateway's offline adapter
    assert "plough share" in reply["text"]
    assert done["applied"]["ACTION_KIND_SAY"] >= 1
    assert sum(done["applied"].values()) == 5 * len(answered)  # one action per Ori per tick, applied
