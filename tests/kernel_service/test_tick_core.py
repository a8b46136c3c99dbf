"""Core selection: EGBE_KERNEL_CORE=c|numpy, then the configured choice, auto meaning C when built."""

from __future__ import annotations

import pytest

from kernel_service.tick_core import CORE_ENV, c_core_available, select_core


def test_the_c_core_was_built_at_install() -> None:
    assert c_core_available()


def test_environment_selects_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CORE_ENV, "numpy")
    assert select_core(configured="c").name == "numpy"
    monkeypatch.setenv(CORE_ENV, "c")
    assert select_core(configured="numpy").name == "c"
    monkeypatch.delenv(CORE_ENV)
    assert select_core(configured="numpy").name == "numpy"
    assert select_core().name == "c"


def test_unknown_core_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CORE_ENV, "fortran")
    with pytest.raises(ValueError, match=CORE_ENV):
        select_core()
