"""The console's settings (`console` key): where it listens, how often it polls the gateway, who may
view it and how long a session lives."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from services.settings import ChassisSettings


class ConsoleConfig(BaseModel):
    """How the operator console serves; `egbe up` serves it unless `enabled` is false."""

    model_config = {"extra": "forbid"}

    enabled: bool = Field(
        default=True, description="`egbe up` (and `egbe demo`'s own services) serve the console."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address the console listens on; loopback unless an operator chooses otherwise.",
    )
    port: int = Field(default=8040, ge=0, le=65535, description="HTTP port of the console (0: any free one).")
    poll_interval_seconds: float = Field(
        default=0.25,
        ge=0.05,
        le=10.0,
        description=(
            "How often the one shared poll loop reads the gateway (ListWorlds, new audit records) while "
            "any page is watching; no page open, no polling."
        ),
    )
    viewer_tokens_file: Path | None = Field(
        default=None,
        description=(
            'JSON {"<viewer name>": "<token>"} of read-only viewers (tokens of 16+ characters, file '
            "owner-only); unset = no viewers. Viewer tokens are the console's own and open nothing else."
        ),
    )
    session_idle_seconds: float = Field(
        default=3600.0, gt=0, description="A session unused this long is signed out."
    )
    max_sessions: int = Field(
        default=1000, gt=0, description="Sessions held at once; the least recently used goes first."
    )
    stream_rows: int = Field(
        default=200, ge=10, le=5000, description="Calls kept per world for the live stream (newest)."
    )


class ConsoleSettings(ChassisSettings):
    """What a console process needs: the chassis settings (endpoints, TLS, tokens) and its own key."""

    console: ConsoleConfig = Field(default_factory=ConsoleConfig, description="The operator console.")
