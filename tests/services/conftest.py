"""Fixtures of the chassis tests."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pytest
import structlog

from services.logging import configure_logging
from services.settings import LogFormat


@pytest.fixture
def json_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The process's structlog output, as the JSON lines a deployment reads."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(LogFormat.JSON, "info")
    yield stream
    structlog.reset_defaults()
