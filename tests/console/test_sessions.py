"""Console sessions: ids and CSRF tokens are fresh at sign-in, idle and surplus sessions go, a CSRF token
matches only its own session, and viewer tokens are owner-only and long enough."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.sessions import ConsoleRole, SessionStore, SignedIn, ViewerTokens, csrf_matches


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


OPERATOR = SignedIn("ada", ConsoleRole.OPERATOR, "an-operator-token-of-some-length")


def test_signing_in_replaces_the_anonymous_session_with_a_new_id_and_csrf_token() -> None:
    store = SessionStore(idle_seconds=60, max_sessions=10)
    anonymous = store.new()
    signed = store.sign_in(anonymous, OPERATOR)
    assert signed.session_id != anonymous.session_id
    assert signed.csrf_token != anonymous.csrf_token
    assert store.get(anonymous.session_id) is None  # a planted id is worth nothing after sign-in
    assert store.get(signed.session_id) is signed
    assert signed.user == OPERATOR
    assert len(store) == 1


def test_a_session_idle_too_long_is_gone_and_use_keeps_one_alive() -> None:
    clock = Clock()
    store = SessionStore(idle_seconds=60, max_sessions=10, clock=clock)
    kept, idle = store.new(OPERATOR), store.new(OPERATOR)
    clock.now += 50
    assert store.get(kept.session_id) is kept
    clock.now += 50  # kept was used 50 s ago, idle 100 s ago
    assert store.get(kept.session_id) is kept
    assert store.get(idle.session_id) is None
    assert len(store) == 1


def test_beyond_the_limit_the_least_recently_used_session_goes() -> None:
    store = SessionStore(idle_seconds=60, max_sessions=2)
    first, second = store.new(), store.new()
    assert store.get(first.session_id) is first  # first is now the more recently used
    third = store.new()
    assert store.get(second.session_id) is None
    assert store.get(first.session_id) is first
    assert store.get(third.session_id) is third


def test_a_csrf_token_matches_only_its_own_session() -> None:
    store = SessionStore(idle_seconds=60, max_sessions=10)
    mine, other = store.new(OPERATOR), store.new(OPERATOR)
    assert csrf_matches(mine, mine.csrf_token)
    assert not csrf_matches(mine, other.csrf_token)
    assert not csrf_matches(mine, "")
    assert not csrf_matches(mine, None)
    assert not csrf_matches(None, mine.csrf_token)


def test_viewers_are_named_by_their_token_and_control_nothing(tmp_path: Path) -> None:
    path = tmp_path / "viewers.json"
    path.write_text(json.dumps({"vera": "v" * 24}))
    path.chmod(0o600)
    viewers = ViewerTokens.load(path)
    assert viewers.name_of("v" * 24) == "vera"
    assert viewers.name_of("v" * 23) is None
    assert not SignedIn("vera", ConsoleRole.VIEWER).may_control
    assert OPERATOR.may_control
    assert ViewerTokens.load(None).name_of("v" * 24) is None


def test_a_viewer_tokens_file_others_can_read_or_with_short_tokens_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "viewers.json"
    path.write_text(json.dumps({"vera": "v" * 24}))
    path.chmod(0o644)
    with pytest.raises(ValueError, match=r"can be read or written by others .*chmod 600"):
        ViewerTokens.load(path)
    path.chmod(0o600)
    path.write_text(json.dumps({"vera": "short"}))
    with pytest.raises(ValueError, match="viewer 'vera': the token is shorter than 16 characters"):
        ViewerTokens.load(path)
    path.write_text(json.dumps(["vera"]))
    with pytest.raises(ValueError, match="must hold a JSON object of name -> token"):
        ViewerTokens.load(path)
