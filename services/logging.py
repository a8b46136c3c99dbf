"""structlog setup: JSON off a terminal, pretty on one, with service/world/ori/run/tick/trace_id bound from
context: the chassis binds the service (and the trace id of a traced call), each service what it
learns of the call."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from services.settings import LogFormat

CONTEXT_KEYS = ("service", "world", "ori", "run", "tick", "trace_id")


def configure_logging(log_format: LogFormat = LogFormat.AUTO, level: str = "info") -> None:
    """Configure structlog once per process; safe to call again (tests reconfigure)."""
    numeric_level = logging.getLevelNamesMapping().get(level.upper())
    if numeric_level is None:
        raise ValueError(f"log_level {level!r} is not a logging level")
    pretty = log_format is LogFormat.CONSOLE or (log_format is LogFormat.AUTO and sys.stderr.isatty())
    renderer: Any = structlog.dev.ConsoleRenderer() if pretty else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def bind_context(**values: Any) -> None:
    """Bind request context (service, world, ori, run, tick, trace_id) for every log line in this task."""
    unknown = set(values) - set(CONTEXT_KEYS)
    if unknown:
        raise ValueError(f"unknown log context keys {sorted(unknown)}")
    structlog.contextvars.bind_contextvars(**values)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
