"""Typed runtime settings: defaults < TOML file < `EGBE_*` environment < explicit arguments.

This module holds what every service process needs whatever it serves (mode, data directory,
endpoints, TLS, tokens, logging, server limits); each service package adds its own config in a
subclass of `ChassisSettings`, and the composition root (`assembly.settings`) joins them all.

A setting the user got wrong is reported as a `UserError` naming where it came from (the file or the
environment variable), the key and the fix, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, Field, FilePath, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

SERVICE_NAMES = ("kernel", "gateway", "cognition", "policy", "biography")
ENV_PREFIX = "EGBE_"


class UserError(ValueError):
    """Something the user gave is wrong (a file, a key, a value); the message says where and how to fix it.

    The CLI prints it, one `egbe: ` line per line of the message, and exits with status 2.
    """


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
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description=(
            "Serve Prometheus metrics (/metrics, plaintext) on this port at `host` (127.0.0.1 for a "
            "unix socket); 0 = any free port, published in endpoints.json; unset = not served."
        ),
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
    """gRPC on 50051 onwards, metrics on 9464 onwards (kernel, gateway, cognition, policy, biography)."""
    return {name: Endpoint(port=50051 + i, metrics_port=9464 + i) for i, name in enumerate(SERVICE_NAMES)}


MIB = 1024 * 1024


class ServerLimits(BaseModel):
    """What one service's gRPC server accepts before it refuses or sheds a call."""

    model_config = {"extra": "forbid"}

    max_message_bytes: int = Field(
        gt=0,
        description=(
            "Largest message this service receives or sends; a larger one is refused with "
            "RESOURCE_EXHAUSTED before any handler runs."
        ),
    )
    max_concurrent_calls: int = Field(
        gt=0,
        description=(
            "Calls (a stream counts for its whole life) in progress at once; one more is answered "
            "RESOURCE_EXHAUSTED with a google.rpc.RetryInfo instead of waiting in a queue."
        ),
    )


# Each service's largest legitimate message, with room: the kernel's is a columnar PerceptionBatch
# of 10^6 agents in delta form, 37 bytes per agent (slots 4, signal_flags 2, visual_lod 1,
# player_proximity_mm 4, addressed_by_player_id 4, goal_ref 4, goal_progress_signature 8, five
# basis-point needs 2 each) = 37,000,000 bytes (35.3 MiB). The biography's is a whole Append or Read
# page; the others carry prompts, claims and reports of kilobytes.
DEFAULT_SERVER_LIMITS: dict[str, dict[str, int]] = {
    "kernel": {"max_message_bytes": 48 * MIB, "max_concurrent_calls": 32},
    "gateway": {"max_message_bytes": 16 * MIB, "max_concurrent_calls": 4096},
    "cognition": {"max_message_bytes": 4 * MIB, "max_concurrent_calls": 1024},
    "policy": {"max_message_bytes": 4 * MIB, "max_concurrent_calls": 512},
    "biography": {"max_message_bytes": 16 * MIB, "max_concurrent_calls": 1024},
}
assert tuple(DEFAULT_SERVER_LIMITS) == SERVICE_NAMES


def _default_server_limits() -> dict[str, ServerLimits]:
    return {name: ServerLimits(**limits) for name, limits in DEFAULT_SERVER_LIMITS.items()}


class ChassisSettings(BaseSettings):
    """What a service process needs whatever it serves; each field documents itself."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
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
        default=64 * MIB,
        gt=0,
        description=(
            "Largest gRPC message an Egbe client (a service dialling another, the CLI, a world "
            "client) sends or receives; each server's own limit is server_limits.<service>."
        ),
    )
    server_limits: dict[str, ServerLimits] = Field(
        default_factory=_default_server_limits,
        description="Per service: largest message and calls in progress at once; unset keys keep defaults.",
    )
    max_concurrent_streams: int = Field(
        default=1024, gt=0, description="HTTP/2 streams one client connection may hold open at once."
    )
    max_connection_age_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="A connection older than this (±10%) is told to go away; clients reconnect for more.",
    )
    max_connection_age_grace_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "How long calls on an aged connection may still run before it is closed; unset = until "
            "they end (a world's tick stream and a subscription are long-lived)."
        ),
    )
    max_connection_idle_seconds: float = Field(
        default=600.0, gt=0, description="A connection with no call in progress this long is closed."
    )
    handshake_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A connection that has not finished TLS and sent its HTTP/2 preface by then is closed.",
    )
    shed_retry_after_seconds: float = Field(
        default=0.25, gt=0, description="The RetryInfo delay a call shed for load tells its client to wait."
    )
    refusal_log_lines_per_minute: int = Field(
        default=60,
        ge=0,
        description=(
            "Refused calls (UNAUTHENTICATED, PERMISSION_DENIED) logged per service per minute; the "
            "rest are counted and the count is logged with the next line."
        ),
    )
    reflection: bool | None = Field(
        default=None,
        description=(
            "Serve gRPC server reflection (it lists every service on a port, OperatorService included); "
            "unset = on in embedded mode, off in production."
        ),
    )
    shutdown_grace_seconds: float = Field(
        default=5.0, ge=0, description="How long SIGTERM waits for in-flight calls to drain."
    )
    tokens_file: Path | None = Field(
        default=None,
        description="JSON file {token: role}; embedded mode generates <data_dir>/tokens.json if unset.",
    )
    database_url: str | None = Field(
        default=None,
        description="postgresql://... for production storage; unset = SQLite files under data_dir.",
    )
    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS / mTLS certificates for serving and dialling."
    )
    otel_endpoint: str | None = Field(
        default=None,
        description=(
            "OTLP/gRPC collector traces are exported to (e.g. http://127.0.0.1:4317); unset = the "
            "standard OTEL_EXPORTER_OTLP_ENDPOINT, and with neither no trace is recorded."
        ),
    )
    trace_sample_ratio: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description=(
            "Share of cognition calls whose trace is recorded (the kernel's dispatch decides; every "
            "later span follows its parent, and a world server's own traceparent is honoured)."
        ),
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

    @field_validator("server_limits", mode="before")
    @classmethod
    def _limits_over_defaults(cls, value: Any) -> Any:
        """A service's limits given in part keep the defaults of the keys not given."""
        if not isinstance(value, Mapping):
            return value  # pydantic names the type error
        unknown = sorted(set(value) - set(SERVICE_NAMES))
        if unknown:
            raise ValueError(f"unknown service name(s) {unknown}; expected {list(SERVICE_NAMES)}")
        merged: dict[str, Any] = {name: dict(limits) for name, limits in DEFAULT_SERVER_LIMITS.items()}
        for name, given in value.items():
            raw = given.model_dump() if isinstance(given, ServerLimits) else given
            merged[name] = {**merged[name], **raw} if isinstance(raw, Mapping) else raw
        return merged

    def serves_reflection(self) -> bool:
        """Whether servers list their services by reflection: as configured, else only when embedded."""
        return self.reflection if self.reflection is not None else self.mode is Mode.EMBEDDED

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
        explicit = init_settings().get("config_file")
        self._path = explicit or env_settings().get("config_file")
        self._named_by = "--config" if explicit else f"{ENV_PREFIX}CONFIG_FILE"

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        if not self._path:
            return {}
        path = Path(self._path)
        if not path.is_file():
            raise UserError(
                f"config file {path} ({self._named_by}) does not exist; name an existing TOML file"
            )
        try:
            return TomlConfigSettingsSource(self.settings_cls, toml_file=path)()
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"config file {path} is not valid TOML: {exc}; fix that line") from None
        except OSError as exc:
            raise UserError(f"config file {path} cannot be read: {exc.strerror}") from None


Settings = TypeVar("Settings", bound=ChassisSettings)


def build_settings(settings_cls: type[Settings], **overrides: Any) -> Settings:
    """Build settings of this class with the documented precedence; explicit overrides win.

    Raises UserError for an unknown key, a value out of range, bad TOML or a missing config file; an
    unknown key's suggestion is drawn from every key `settings_cls` knows."""
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        lines = [_describe(settings_cls, error, overrides) for error in exc.errors()]
        raise UserError("\n".join(lines)) from None
    except SettingsError as exc:
        raise UserError(_describe_unparsable(exc)) from None


def _describe(settings_cls: type[BaseModel], error: ErrorDetails, overrides: Mapping[str, Any]) -> str:
    """One line: where the bad setting came from, its key, what is wrong and the fix."""
    loc = error["loc"]
    key = ".".join(str(part) for part in loc)
    env_var = _env_var_setting(loc)
    if loc and loc[0] in overrides:
        where = "argument"
    elif env_var is not None:
        where = f"environment variable {env_var}"
    else:
        config_file = overrides.get("config_file") or _env_value(f"{ENV_PREFIX}CONFIG_FILE")
        where = f"config file {config_file}" if config_file else "settings"
    if error["type"] == "extra_forbidden":
        suggestion = _suggest(settings_cls, loc)
        if suggestion is None:
            return f"{where}: unknown key {key}; remove it (docs/configuration.md lists every key)"
        if env_var is not None:
            named = _env_name(suggestion)
        else:  # in a TOML table, a sibling is written by its own name
            sibling = suggestion[:-1] == tuple(loc[:-1])
            named = str(suggestion[-1]) if sibling else ".".join(map(str, suggestion))
        return f"{where}: unknown key {key}; did you mean {named}?"
    problem = error["msg"].removeprefix("Value error, ")
    if problem.startswith("Input should"):
        problem = "it should" + problem.removeprefix("Input should")
    elif error["type"] == "missing":
        problem = "it is required"
    if isinstance(error["input"], str | int | float):
        key = f"{key} = {error['input']!r}"
    return f"{where}: {key}: {problem}" if loc else f"{where}: {problem}"


def _describe_unparsable(exc: SettingsError) -> str:
    """pydantic-settings refuses an environment value it cannot parse as JSON (a nested setting)."""
    match = re.search(r'field "(\w+)"', str(exc))
    if match is None:
        return str(exc)
    name = _env_name([match.group(1)])
    return (
        f"environment variable {name} is not valid JSON; set it to a JSON value, or set one key "
        f"with {name}__<KEY>"
    )


def _env_name(parts: Sequence[str | int]) -> str:
    return ENV_PREFIX + "__".join(str(part) for part in parts).upper()


def _env_value(name: str) -> str | None:
    """The environment's value of `name`, matched without regard to case (as pydantic-settings does)."""
    return next((value for key, value in os.environ.items() if key.upper() == name), None)


def _env_var_setting(loc: Sequence[str | int]) -> str | None:
    """The EGBE_* variable that set this key (or the nested setting holding it), if one did."""
    for end in range(len(loc), 0, -1):
        name = _env_name(loc[:end])
        if _env_value(name) is not None:
            return name
    return None


def _model_of(annotation: Any) -> Any:
    """The model an annotation holds: through `X | None`, `dict[str, X]` and `list[X]`."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        return _model_of(inner[0]) if len(inner) == 1 else None
    if origin in (dict, list):
        return _model_of(get_args(annotation)[-1])
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _suggest(settings_cls: type[BaseModel], loc: Sequence[str | int]) -> tuple[str | int, ...] | None:
    """The path of the known key nearest an unknown one: a sibling, else any key reached by name."""
    model: Any = settings_cls
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            model = _model_of(field.annotation)
        if model is None:
            return None
    name = str(loc[-1])
    sibling = difflib.get_close_matches(name, list(model.model_fields), n=1)
    if sibling:
        return (*loc[:-1], sibling[0])
    paths = {path[-1]: path for path in _key_paths(settings_cls, ())}
    anywhere = difflib.get_close_matches(name, list(paths), n=1)
    return paths[anywhere[0]] if anywhere else None


def _key_paths(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Every key reachable through nested models alone (not through maps or lists), as a path."""
    for name, field in model.model_fields.items():
        nested = get_origin(field.annotation) not in (dict, list)
        inner = _model_of(field.annotation) if nested else None
        if inner is None:
            yield (*prefix, name)
        else:
            yield from _key_paths(inner, (*prefix, name))
