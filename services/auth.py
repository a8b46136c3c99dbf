"""Bearer-token authentication with three roles; each RPC declares the roles it admits."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from services.errors import PermissionDenied, Unauthenticated
from services.files import private_dir, refuse_shared_secret

AUTHORIZATION_HEADER = "authorization"
BEARER_PREFIX = "Bearer "


class Role(StrEnum):
    """Who is calling: a world server, another Egbe service, or a human operator."""

    WORLD = "world"
    SERVICE = "service"
    OPERATOR = "operator"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# Digest hex characters naming a token in audit records: enough to tell tokens apart, nothing to replay.
TOKEN_ID_CHARS = 12


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its role and an id naming its token without revealing it."""

    role: Role
    token_id: str  # "<role>:<first 12 hex digits of the token's SHA-256>"


class TokenStore:
    """Maps presented tokens to principals; keeps only digests so lookups do not compare secrets."""

    def __init__(self, tokens_by_role: Mapping[Role, list[str]]) -> None:
        self._by_digest: dict[str, Principal] = {}
        for role, tokens in tokens_by_role.items():
            for token in tokens:
                if len(token) < 16:
                    raise ValueError(
                        f"the {role.value} token is shorter than 16 characters; use 16 or more random ones"
                    )
                digest = _digest(token)
                self._by_digest[digest] = Principal(role, f"{role.value}:{digest[:TOKEN_ID_CHARS]}")
        self._first_token = {role: tokens[0] for role, tokens in tokens_by_role.items() if tokens}

    @classmethod
    def load(cls, path: Path) -> TokenStore:
        """Read `{role: token | [tokens]}` JSON; unknown roles and malformed files are refused."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"tokens file {path} is unreadable: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"tokens file {path} must hold a JSON object of role -> token(s)")
        tokens: dict[Role, list[str]] = {}
        for key, value in raw.items():
            try:
                role = Role(key)
            except ValueError as exc:
                raise ValueError(f"tokens file {path}: unknown role {key!r}") from exc
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(
                    f"tokens file {path}: role {key!r} must map to a string or a list of strings"
                )
            tokens[role] = values
        try:
            return cls(tokens)
        except ValueError as exc:
            raise ValueError(f"tokens file {path}: {exc}") from None

    def role_of(self, metadata: Mapping[str, str]) -> Role:
        """The caller's role, or Unauthenticated when the token is missing or unknown."""
        return self.principal_of(metadata.get(AUTHORIZATION_HEADER)).role

    def principal_of(self, header: str | None) -> Principal:
        """Who presented this authorization header, or Unauthenticated when it names nobody.

        The presented token is hashed and the digest looked up, so no comparison touches a secret."""
        if header is None:
            raise Unauthenticated("missing bearer token in the authorization metadata")
        if not header.startswith(BEARER_PREFIX):
            raise Unauthenticated("authorization metadata must be 'Bearer <token>'")
        principal = self._by_digest.get(_digest(header[len(BEARER_PREFIX) :]))
        if principal is None:
            raise Unauthenticated("unknown bearer token")
        return principal

    def token_for(self, role: Role) -> str:
        """A token of the given role, for in-process clients (embedded mode, CLI)."""
        try:
            return self._first_token[role]
        except KeyError:
            raise ValueError(f"no {role.value} token is configured") from None


def authorize(role: Role, admitted: frozenset[Role], method: str) -> None:
    """Refuse a caller whose role the RPC does not admit."""
    if role not in admitted:
        allowed = ", ".join(sorted(r.value for r in admitted)) or "nobody"
        raise PermissionDenied(f"role {role.value!r} may not call {method} (admits: {allowed})")


def ensure_embedded_tokens(path: Path) -> TokenStore:
    """Create one random token per role on first start, readable only by the owner; reuse it after."""
    if not path.exists():
        private_dir(path.parent)
        content = json.dumps({role.value: secrets.token_urlsafe(32) for role in Role}, indent=2)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first; read theirs
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(content + "\n")
    refuse_shared_secret(path, "tokens file")
    return TokenStore.load(path)


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a bearer token."""
    return ((AUTHORIZATION_HEADER, f"{BEARER_PREFIX}{token}"),)
