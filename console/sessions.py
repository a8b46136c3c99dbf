"""Console sessions and their CSRF tokens, kept in this process's memory; the browser holds only a
random session id in an HttpOnly, SameSite=Strict cookie.

A visitor gets an anonymous session (and its CSRF token) on the sign-in page, so even the sign-in form
is CSRF-protected; signing in replaces that session with a new id and a new CSRF token, so an id planted
before sign-in (session fixation) is worth nothing after it. Held in memory on purpose: an operator's
token never reaches a disk or the browser, and restarting the console signs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from services.files import refuse_shared_secret

COOKIE_NAME = "egbe_console"
CSRF_FIELD = "csrf_token"
MIN_TOKEN_CHARS = 16


class ConsoleRole(StrEnum):
    """An operator controls; a viewer sees every page and controls nothing."""

    OPERATOR = "operator"
    VIEWER = "viewer"


@dataclass(frozen=True)
class SignedIn:
    """Who a session belongs to. An operator's own bearer token is kept so that each control goes to the
    gateway as that operator's; a viewer has none."""

    name: str
    role: ConsoleRole
    token: str | None = field(default=None, repr=False)

    @property
    def may_control(self) -> bool:
        return self.role is ConsoleRole.OPERATOR and self.token is not None


@dataclass
class Session:
    session_id: str
    csrf_token: str = field(repr=False)
    last_seen: float
    user: SignedIn | None = None


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


class SessionStore:
    """Sessions by id, the least recently used dropped first beyond `max_sessions`, and any unused for
    `idle_seconds` dropped when next looked up."""

    def __init__(
        self, idle_seconds: float, max_sessions: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._idle_seconds = idle_seconds
        self._max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle clock restarted), or None."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self._idle_seconds:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def new(self, user: SignedIn | None = None) -> Session:
        """A session with a fresh id and CSRF token: anonymous, or signed in as `user`."""
        session = Session(_new_secret(), _new_secret(), self._clock(), user)
        self._sessions[session.session_id] = session
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return session

    def sign_in(self, previous: Session | None, user: SignedIn) -> Session:
        """Replace `previous` (if any) by a new session for `user`: new id, new CSRF token."""
        if previous is not None:
            self.drop(previous.session_id)
        return self.new(user)

    def drop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)


def csrf_matches(session: Session | None, presented: str | None) -> bool:
    """Whether a form carried its session's CSRF token (compared in constant time)."""
    if session is None or not presented:
        return False
    return hmac.compare_digest(session.csrf_token.encode(), presented.encode())


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ViewerTokens:
    """The read-only viewers: a name per token, looked up by the token's SHA-256 digest."""

    def __init__(self, tokens_by_name: dict[str, str]) -> None:
        self._names: dict[str, str] = {}
        for name, token in tokens_by_name.items():
            if len(token) < MIN_TOKEN_CHARS:
                raise ValueError(f"viewer {name!r}: the token is shorter than {MIN_TOKEN_CHARS} characters")
            self._names[_digest(token)] = name

    @classmethod
    def load(cls, path: Path | None) -> ViewerTokens:
        """`{"<name>": "<token>"}` from an owner-only file; no file, no viewers."""
        if path is None:
            return cls({})
        try:
            refuse_shared_secret(path, "viewer tokens file")
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"console.viewer_tokens_file {path}: {exc}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()
        ):
            raise ValueError(f"console.viewer_tokens_file {path} must hold a JSON object of name -> token")
        try:
            return cls(raw)
        except ValueError as exc:
            raise ValueError(f"console.viewer_tokens_file {path}: {exc}") from None

    def name_of(self, token: str) -> str | None:
        return self._names.get(_digest(token))
