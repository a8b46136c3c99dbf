"""The HTN method library is in the kernel fingerprint: a replay under other methods is caught."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egbe.v1 import kernel_pb2
from kernel_service.behavior.htn import DEFAULT_METHODS_PATH, load_method_library
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, read_records, replay
from tests.kernel_service.frames import WORLD, columns, registrations


def with_methods(tmp_path: Path, name: str, edit: tuple[str, str] | None) -> Kernel:
    text = DEFAULT_METHODS_PATH.read_text(encoding="utf-8")
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return Kernel(
        KernelConfig(), select_core("numpy"), PersonalityBehaviorLayer(library=load_method_library(path))
    )


def test_the_fingerprint_covers_the_library_version_and_its_content(tmp_path: Path) -> None:
    shipped = with_methods(tmp_path, "same.toml", None).fingerprint.fnv1a64
    bumped = with_methods(
        tmp_path, "bumped.toml", ('library_version = "', 'library_version = "x')
    ).fingerprint
    # An edit that forgot to bump the version still changes the fingerprint.
    reranked = with_methods(tmp_path, "edited.toml", ("priority = 90", "priority = 91")).fingerprint
    without_layer = Kernel(KernelConfig(), select_core("numpy")).fingerprint.fnv1a64
    assert (
        Kernel(KernelConfig(), select_core("numpy"), PersonalityBehaviorLayer()).fingerprint.fnv1a64
        == shipped
    )
    assert len({shipped, bumped.fnv1a64, reranked.fnv1a64, without_layer}) == 4
    assert without_layer == KernelConfig().fingerprint().fnv1a64


def test_a_replay_under_different_methods_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    recorder = Kernel(KernelConfig(), select_core("c"), PersonalityBehaviorLayer())
    writer = TickLogWriter(log, recorder, snapshot_every_ticks=50)
    request = kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(3))
    recorder.register(request.world_id, request.agents)
    writer.record_registration(request)
    batch = columns(1, signal_flags=np.zeros(3, dtype=np.uint16))
    writer.record_tick(batch, [], recorder.tick(batch), recorder)
    writer.close()
    config = next(read_records(log)).config
    assert config.methods_library_version == recorder.behavior.library.library_version  # type: ignore[union-attr]
    assert config.fingerprint == recorder.fingerprint
    assert replay(log, Kernel(KernelConfig(), select_core("numpy"), PersonalityBehaviorLayer())).identical
    other = with_methods(tmp_path, "other.toml", ('library_version = "', 'library_version = "other-'))
    with pytest.raises(ValueError, match="log recorded config"):
        replay(log, other)
