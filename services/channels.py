"""The one way any Egbe client dials a service: plaintext, TLS or mTLS as the settings say."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import grpc

from services.settings import ChassisSettings, TlsMode, TlsSettings
from services.tracing import client_interceptors

# A server bound to a wildcard address is dialled on loopback from inside its own host or pod.
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "::": "[::1]"}  # noqa: S104


def channel_options(settings: ChassisSettings) -> list[tuple[str, Any]]:
    """A client channel's message-size limits (each server has its own: services.limits)."""
    return [
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
    ]


def dialable_target(target: str) -> str:
    """A target a local client can dial: a wildcard listen address becomes loopback."""
    if target.startswith("unix:"):
        return target
    host, _, port = target.rpartition(":")
    return f"{_WILDCARD_HOSTS.get(host, host)}:{port}"


def uses_tls(target: str, tls: TlsSettings) -> bool:
    """Whether a connection to `target` is wrapped in TLS (never for unix-domain sockets)."""
    return tls.mode is not TlsMode.OFF and not target.startswith("unix:")


def client_credentials(tls: TlsSettings) -> grpc.ChannelCredentials:
    """Verify servers against ca_file (system roots when unset); present our certificate in mTLS."""
    mutual = tls.mode is TlsMode.MTLS  # TlsSettings guarantees cert_file and key_file then
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_file.read_bytes() if tls.ca_file else None,
        private_key=tls.key_file.read_bytes() if mutual and tls.key_file else None,
        certificate_chain=tls.cert_file.read_bytes() if mutual and tls.cert_file else None,
    )


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """Serve cert_file; in mTLS, require every client to present a certificate chaining to ca_file."""
    if tls.cert_file is None or tls.key_file is None:
        raise ValueError(f"tls.mode={tls.mode.value} needs tls.cert_file and tls.key_file to serve")
    mutual = tls.mode is TlsMode.MTLS
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=tls.ca_file.read_bytes() if mutual and tls.ca_file else None,
        require_client_auth=mutual,
    )


def open_channel(target: str, settings: ChassisSettings) -> grpc.aio.Channel:
    """An asyncio channel to `target`, secured per `settings.tls`; use as `async with`."""
    target = dialable_target(target)
    options = channel_options(settings)
    interceptors = client_interceptors() or None
    if uses_tls(target, settings.tls):
        return grpc.aio.secure_channel(
            target, client_credentials(settings.tls), options=options, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)


ChannelOpener = Callable[[str], grpc.aio.Channel]


def channel_opener(settings: ChassisSettings) -> ChannelOpener:
    """`open_channel` bound to these settings, for clients that learn their targets later."""
    return partial(open_channel, settings=settings)


def open_blocking_channel(target: str, settings: ChassisSettings) -> grpc.Channel:
    """A blocking channel to `target`, secured per `settings.tls`, for synchronous clients."""
    target = dialable_target(target)
    options = channel_options(settings)
    if uses_tls(target, settings.tls):
        return grpc.secure_channel(target, client_credentials(settings.tls), options=options)
    return grpc.insecure_channel(target, options=options)
