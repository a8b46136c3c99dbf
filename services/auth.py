"""Bearer-token authentication with three roles; each RPC declares the roles it admits.

A world token may also be scoped to tenants and worlds: the chassis records who is calling for the
length of each call (`enter_call`), and a handler whose request names a tenant or a world asks
`require_scope` before it acts, which refuses anything outside the token's scope as PERMISSION_DENIED
and reports it as the chassis reports its own refusals (logged, and audited where the service audits).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from services.errors import EgbeError, FieldViolation, PermissionDenied, Unauthenticated
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
class Scope:
    """The tenants and worlds a token may act for; None = any. A world ending in "*" names every
    world starting with what precedes it ("hamlet-*": one scenario's runs, whatever their seed)."""

    tenants: frozenset[str] | None = None
    worlds: tuple[str, ...] | None = None

    @property
    def unrestricted(self) -> bool:
        return self.tenants is None and self.worlds is None

    def holds_tenant(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants

    def holds_world(self, world: str) -> bool:
        if self.worlds is None:
            return True
        return any(world.startswith(w[:-1]) if w.endswith("*") else world == w for w in self.worlds)


UNSCOPED = Scope()


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its role, an id naming its token without revealing it, and what the
    token may act for."""

    role: Role
    token_id: str  # "<role>:<first 12 hex digits of the token's SHA-256>"
    scope: Scope = field(default=UNSCOPED)


@dataclass(frozen=True)
class ScopedToken:
    """A token and its scope, as a tokens file entry `{"token": …, "tenants": […], "worlds": […]}`."""

    token: str
    scope: Scope


class TokenStore:
    """Maps presented tokens to principals; keeps only digests so lookups do not compare secrets."""

    def __init__(self, tokens_by_role: Mapping[Role, list[str] | list[str | ScopedToken]]) -> None:
        self._by_digest: dict[str, Principal] = {}
        self._first_token: dict[Role, str] = {}
        for role, entries in tokens_by_role.items():
            for entry in entries:
                token, scope = (
                    (entry.token, entry.scope) if isinstance(entry, ScopedToken) else (entry, UNSCOPED)
                )
                if len(token) < 16:
                    raise ValueError(
                        f"the {role.value} token is shorter than 16 characters; use 16 or more random ones"
                    )
                if role is not Role.WORLD and not scope.unrestricted:
                    raise ValueError(f"only world tokens can be scoped; the {role.value} token names a scope")
                digest = _digest(token)
                self._by_digest[digest] = Principal(role, f"{role.value}:{digest[:TOKEN_ID_CHARS]}", scope)
                self._first_token.setdefault(role, token)

    @classmethod
    def load(cls, path: Path) -> TokenStore:
        """Read `{role: token | [token | {"token", "tenants", "worlds"}]}` JSON; unknown roles, keys
        and malformed entries are refused, naming them."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"tokens file {path} is unreadable: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"tokens file {path} must hold a JSON object of role -> token(s)")
        tokens: dict[Role, list[str | ScopedToken]] = {}
        for key, value in raw.items():
            try:
                role = Role(key)
            except ValueError as exc:
                raise ValueError(f"tokens file {path}: unknown role {key!r}") from exc
            values = [value] if isinstance(value, str | dict) else value
            if not isinstance(values, list):
                raise ValueError(f"tokens file {path}: role {key!r} must map to a token or a list of tokens")
            try:
                tokens[role] = [_entry(v, f"{key}[{i}]") for i, v in enumerate(values)]
            except ValueError as exc:
                raise ValueError(f"tokens file {path}: {exc}") from None
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


_SCOPED_KEYS = frozenset({"token", "tenants", "worlds"})


def _entry(value: object, where: str) -> str | ScopedToken:
    """One tokens-file entry: a bare token (unscoped), or a token with the tenants and worlds it may
    act for (a list each; a key left out is unrestricted)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("token"), str):
        raise ValueError(f"{where} must be a token string or an object with a string 'token'")
    unknown = sorted(set(value) - _SCOPED_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; an entry holds token, tenants and worlds")
    names = {}
    for key in ("tenants", "worlds"):
        listed = value.get(key)
        if listed is not None and (
            not isinstance(listed, list) or not listed or not all(isinstance(n, str) and n for n in listed)
        ):
            raise ValueError(f"{where}.{key} must be a non-empty list of names")
        names[key] = listed
    tenants, worlds = names["tenants"], names["worlds"]
    scope = Scope(
        frozenset(tenants) if tenants is not None else None, tuple(worlds) if worlds is not None else None
    )
    return ScopedToken(value["token"], scope)


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


# Told of every call a service refuses (no token, wrong role, outside its scope) before it answers:
# the RPC, the refusal, who called (None when no known token was presented) and the peer's address.
RefusalHook = Callable[[str, EgbeError, "Principal | None", str], None]


@dataclass(frozen=True)
class _Call:
    principal: Principal
    refused: Callable[[EgbeError], None]


_CURRENT_CALL: ContextVar[_Call | None] = ContextVar("egbe_current_call", default=None)


def enter_call(principal: Principal, refused: Callable[[EgbeError], None]) -> None:
    """Record who makes the call this task serves (the chassis, once authorized); `refused` reports a
    scope refusal as the chassis reports its own."""
    _CURRENT_CALL.set(_Call(principal, refused))


def caller_scope() -> Scope:
    """What the current call's token may act for (unrestricted outside any call)."""
    call = _CURRENT_CALL.get()
    return UNSCOPED if call is None else call.principal.scope


def require_scope(*, tenant: str | None = None, world: str | None = None, at: str = "") -> None:
    """Refuse the current call when its token is scoped and the request's tenant or world lies outside
    that scope; `at` is the message holding the `tenant_id` and `world_id` fields ("" for the
    request itself), so the refusal names them. Outside any call (in-process use) there is no token to
    scope; an unscoped token passes at the cost of one lookup."""
    call = _CURRENT_CALL.get()
    if call is None or call.principal.scope.unrestricted:
        return
    scope = call.principal.scope
    prefix = f"{at}." if at else ""
    outside = []
    for name, value, held in (("tenant", tenant, scope.holds_tenant), ("world", world, scope.holds_world)):
        if value is not None and not held(value):
            why = (
                f"{name} {value!r} is not among this token's {name}s"
                if value
                else f"must name one of this token's {name}s"
            )
            outside.append(FieldViolation(f"{prefix}{name}_id", why))
    if outside:
        error = PermissionDenied(
            f"{call.principal.token_id} may not act outside its scope: "
            + "; ".join(v.description for v in outside),
            violations=outside,
        )
        call.refused(error)
        raise error
