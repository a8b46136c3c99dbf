"""Run artifacts: written and read back valid; corrupted or hand-broken ones refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egbe.v1 import action_pb2
from tests.world.recorded_run import recorded_artifact
from world.artifact import ArtifactError, read_artifact, write_artifact
from world.divergence import first_divergence
from world.framing import FrameError, read_frames, write_frame


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "artifact.json"
    write_artifact(recorded_artifact(), path)
    assert read_artifact(path) == recorded_artifact()


def test_corrupted_artifacts_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "artifact.json"
    write_artifact(recorded_artifact(), path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_artifact(path)
    doc = json.loads(text)
    doc["bill"]["calls_issued"] = -1
    del doc["seed"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match=r"bill\.calls_issued") as caught:
        read_artifact(path)
    assert "seed" in str(caught.value)


def _result(tick: int, clotho: int) -> action_pb2.TickResult:
    result = action_pb2.TickResult()
    result.report.tick = tick
    result.report.clotho_count = clotho
    result.actions.intents.add(slot=0, kind=action_pb2.ACTION_KIND_WORK)
    return result


def test_frames_round_trip_and_truncation_is_named(tmp_path: Path) -> None:
    path = tmp_path / "results.bin"
    with path.open("wb") as stream:
        for tick in range(3):
            write_frame(stream, _result(tick, tick))
    assert [r.report.tick for r in read_frames(path, action_pb2.TickResult)] == [0, 1, 2]
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(FrameError, match="frame 2 is truncated"):
        list(read_frames(path, action_pb2.TickResult))
    path.write_bytes(b"\x05garbage-not-a-message")
    with pytest.raises(FrameError, match="frame 0"):
        list(read_frames(path, action_pb2.TickResult))


def test_first_divergence_names_the_field_path_and_both_values() -> None:
    recorded, fresh = _result(9, 2), _result(9, 2)
    assert first_divergence(recorded, fresh) is None
    fresh.actions.intents[0].kind = action_pb2.ACTION_KIND_REST
    found = first_divergence(recorded, fresh)
    assert found is not None
    assert found.path == "actions.intents[0].kind"
    assert (found.recorded, found.fresh) == ("13", "16")
    fresh.actions.intents.add(slot=1)
    fresh.actions.intents[0].kind = action_pb2.ACTION_KIND_WORK
    extra = first_divergence(recorded, fresh)
    assert extra is not None
    assert extra.path == "actions.intents[1]"
    assert extra.recorded == "<absent>"
