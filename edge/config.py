"""The edge's settings: where it listens, what it forwards, and the largest frame it reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edge.catalogue import check_withheld
from services.settings import MIB, ChassisSettings


class EdgeConfig(BaseModel):
    """How the edge serves the protocol over HTTP/JSON and WebSocket (docs/edge.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True, description="Serve the edge beside the services in `egbe up`; false = gRPC only."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address the edge listens on; loopback unless an engine on another host must reach it.",
    )
    port: int = Field(default=50057, ge=0, le=65535, description="HTTP and WebSocket port (0 = any free).")
    max_frame_bytes: int = Field(
        default=64 * MIB,
        gt=0,
        description=(
            "Largest request body or WebSocket frame read; a larger one is refused with "
            "RESOURCE_EXHAUSTED before anything is forwarded. Frames over twice this are not read at "
            "all: the socket closes with 1009 (message too big)."
        ),
    )
    withheld_services: tuple[str, ...] = Field(
        default=("OperatorService",),
        description=(
            "gRPC services (short names) the edge does not serve; every other service of egbe.v1 is "
            "served. OperatorService stays on gRPC, where `operator_endpoint` can fence it off."
        ),
    )

    first_frame_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "How long a WebSocket opened without an Authorization header may take to send its "
            '{"authorization": "Bearer …"} frame before it is refused UNAUTHENTICATED.'
        ),
    )
    cors_origins: tuple[str, ...] = Field(
        default=(),
        description=(
            "Web origins whose pages may POST to the edge (a browser game served elsewhere), e.g. "
            '["https://game.example"]; empty = none. WebSockets need no CORS: the token is their guard.'
        ),
    )
    max_connections: int = Field(
        default=1024,
        gt=0,
        description="HTTP connections and WebSockets open at once; one more is answered 503.",
    )

    @field_validator("withheld_services")
    @classmethod
    def _names_protocol_services(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        check_withheld(value)
        return value


class EdgeServiceSettings(ChassisSettings):
    """What an edge process needs: the chassis settings (targets, TLS, limits) and the edge's own."""

    edge: EdgeConfig = Field(default_factory=EdgeConfig, description="The HTTP/JSON and WebSocket edge.")
