"""Typed runtime settings: defaults < TOML file < `EGBE_*` environment < explicit arguments."""

from __future__ import annotations

import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, FilePath, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from biography_service.config import BiographyConfig
from cognition_service.config import CognitionConfig
from gateway.config import GatewayConfig
from kernel_service.config import KernelSettings
from policy_service.config import PolicyConfig

SERVICE_NAMES = ("kernel", "gateway", "cognition", "policy", "biography")


class Mode(StrEnum):
    """Embedded: one process, SQLite, generated tokens. Production: one service per process."""

    EMBEDDED = "embedded"
    PRODUCTION = "production"


class LogFormat(StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class Endpoint(BaseModel):
    """Where one service listens and where clients dial it."""

    host: str = "127.0.0.1"
    port: int = Field(ge=0, le=65535)
    unix_socket: Path | None = Field(
        default=None, description="Serve on this unix-domain socket instead of TCP (co-location)."
    )

    def target(self) -> str:
        """The gRPC target string a client dials."""
        if self.unix_socket is not None:
            return f"unix:{self.unix_socket}"
        return f"{self.host}:{self.port}"


class TlsMode(StrEnum):
    """How gRPC connections are secured."""

    OFF = "off"  # plaintext: loopback and embedded use only
    TLS = "tls"  # servers prove who they are; clients verify them against ca_file (or system roots)
    MTLS = "mtls"  # both sides present certificates signed by ca_file


class TlsSettings(BaseModel):
    """Certificates mounted into a process; one identity both serves and dials.

    A certificate used in mTLS must allow serverAuth and clientAuth (as SPIFFE/cert-manager
    workload certificates do), because every Egbe service is both a server and a client.
    Unix-domain sockets are never wrapped in TLS: the socket file's permissions are the boundary.
    """

    model_config = {"extra": "forbid"}

    mode: TlsMode = Field(default=TlsMode.OFF, description="off, tls or mtls.")
    cert_file: FilePath | None = Field(
        default=None, description="PEM certificate chain this process presents (server; client in mTLS)."
    )
    key_file: FilePath | None = Field(default=None, description="PEM private key of cert_file.")
    ca_file: FilePath | None = Field(
        default=None,
        description="PEM roots peers' certificates must chain to; unset in tls mode = system roots.",
    )

    @model_validator(mode="after")
    def _files_the_mode_needs(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file must be set together")
        if self.mode is TlsMode.MTLS:
            missing = [name for name in ("cert_file", "key_file", "ca_file") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"tls.mode=mtls needs {', '.join('tls.' + m for m in missing)}")
        return self


def _default_endpoints() -> dict[str, Endpoint]:
    return {name: Endpoint(port=50051 + i) for i, name in enumerate(SERVICE_NAMES)}


class EgbeSettings(BaseSettings):
    """Everything a service process needs to start; each field documents itself."""

    model_config = SettingsConfigDict(
        env_prefix="EGBE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    mode: Mode = Field(default=Mode.EMBEDDED, description="embedded or production.")
    config_file: Path | None = Field(
        default=None, description="Optional TOML file read below the environment in precedence."
    )
    data_dir: Path = Field(
        default=Path(".egbe"), description="Where embedded databases, tokens and endpoints live."
    )
    log_format: LogFormat = Field(
        default=LogFormat.AUTO, description="json, console, or auto (console on a TTY)."
    )
    log_level: str = Field(default="info", description="Minimum level logged.")
    endpoints: dict[str, Endpoint] = Field(
        default_factory=_default_endpoints, description="Listen/dial address per service name."
    )
    operator_endpoint: Endpoint | None = Field(
        default=None,
        description=(
            "Serve OperatorService only on this separate listener of the gateway, so network policy "
            "can reserve its port for operators; unset = on the gateway's own endpoint."
        ),
    )
    max_message_bytes: int = Field(
        default=64 * 1024 * 1024, gt=0, description="Largest gRPC message sent or received."
    )
    shutdown_grace_seconds: float = Field(
        default=5.0, ge=0, description="How long SIGTERM waits for in-flight calls to drain."
    )
    tokens_file: Path | None = Field(
        default=None,
        description="JSON file {token: role}; embedded mode generates <data_dir>/tokens.json if unset.",
    )
    kernel: KernelSettings = Field(
        default_factory=KernelSettings, description="The Moirai kernel: core, dispatch targets, tick log."
    )
    database_url: str | None = Field(
        default=None,
        description="postgresql://... for production storage; unset = SQLite files under data_dir.",
    )
    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS / mTLS certificates for serving and dialling."
    )

    biography: BiographyConfig = Field(
        default_factory=BiographyConfig, description="The Ori event log's limits and defaults."
    )
    gateway: GatewayConfig = Field(
        default_factory=GatewayConfig, description="The cognition gateway: budgets, routing, prices, store."
    )
    policy: PolicyConfig = Field(
        default_factory=PolicyConfig, description="Isis, Sophia, cultural review and minor protection."
    )
    cognition: CognitionConfig = Field(
        default_factory=CognitionConfig, description="Assembly limits, mode budgets, retries, Psyche plan."
    )

    @field_validator("endpoints")
    @classmethod
    def _every_service_has_an_endpoint(cls, value: dict[str, Endpoint]) -> dict[str, Endpoint]:
        unknown = sorted(set(value) - set(SERVICE_NAMES))
        if unknown:
            raise ValueError(f"unknown service name(s) {unknown}; expected {list(SERVICE_NAMES)}")
        merged = _default_endpoints()
        merged.update(value)
        return merged

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Explicit arguments beat the environment, which beats the TOML file, which beats defaults.
        return (init_settings, env_settings, _TomlFileSource(settings_cls, init_settings, env_settings))


class _TomlFileSource(PydanticBaseSettingsSource):
    """Reads the TOML file named by an explicit `config_file` argument or `EGBE_CONFIG_FILE`."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
    ) -> None:
        super().__init__(settings_cls)
        self._path = init_settings().get("config_file") or env_settings().get("config_file")

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        if not self._path:
            return {}
        path = Path(self._path)
        if not path.is_file():
            raise FileNotFoundError(f"config_file {path} does not exist")
        try:
            return TomlConfigSettingsSource(self.settings_cls, toml_file=path)()
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"config_file {path} is not valid TOML: {exc}") from exc


def load_settings(**overrides: Any) -> EgbeSettings:
    """Build settings with the documented precedence; explicit overrides win."""
    return EgbeSettings(**overrides)
