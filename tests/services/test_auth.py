"""Bearer tokens, role checks and the embedded token file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from services.auth import Role, Scope, TokenStore, authorize, bearer_metadata, ensure_embedded_tokens
from services.errors import PermissionDenied, Unauthenticated

WORLD_TOKEN = "w" * 24
OPERATOR_TOKEN = "o" * 24


@pytest.fixture
def store() -> TokenStore:
    return TokenStore({Role.WORLD: [WORLD_TOKEN], Role.OPERATOR: [OPERATOR_TOKEN]})


def test_known_token_resolves_to_its_role(store: TokenStore) -> None:
    assert store.role_of(dict(bearer_metadata(WORLD_TOKEN))) is Role.WORLD
    assert store.role_of(dict(bearer_metadata(OPERATOR_TOKEN))) is Role.OPERATOR


def test_principal_names_its_token_by_a_digest_prefix_never_the_token() -> None:
    second_world = "v" * 24
    store = TokenStore({Role.WORLD: [WORLD_TOKEN, second_world], Role.OPERATOR: [OPERATOR_TOKEN]})
    first, second = (
        store.principal_of(dict(bearer_metadata(t))["authorization"]) for t in (WORLD_TOKEN, second_world)
    )
    assert first.role is second.role is Role.WORLD
    assert first.token_id.startswith("world:")
    assert first.token_id != second.token_id
    assert WORLD_TOKEN not in first.token_id
    assert len(first.token_id) == len("world:") + 12


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"authorization": "Bearer " + "x" * 24},
        {"authorization": WORLD_TOKEN},
        {"authorization": "Basic abc"},
    ],
)
def test_missing_wrong_or_malformed_token_is_unauthenticated(
    store: TokenStore, metadata: dict[str, str]
) -> None:
    with pytest.raises(Unauthenticated):
        store.role_of(metadata)


def test_role_not_admitted_is_permission_denied() -> None:
    with pytest.raises(
        PermissionDenied, match=r"role 'world' may not call /egbe\.v1\.OperatorService/KillOri"
    ):
        authorize(Role.WORLD, frozenset({Role.OPERATOR}), "/egbe.v1.OperatorService/KillOri")


def test_exactly_the_admitted_roles_pass() -> None:
    admitted = frozenset({Role.SERVICE, Role.OPERATOR})
    passed = []
    for role in Role:
        try:
            authorize(role, admitted, "/x.Y/Z")
        except PermissionDenied:
            continue
        passed.append(role)
    assert passed == [Role.SERVICE, Role.OPERATOR]


def test_undeclared_method_admits_nobody() -> None:
    with pytest.raises(PermissionDenied, match="nobody"):
        authorize(Role.SERVICE, frozenset(), "/x.Y/Undeclared")


def test_short_tokens_are_refused() -> None:
    with pytest.raises(ValueError, match="shorter than 16"):
        TokenStore({Role.WORLD: ["short"]})


def test_embedded_tokens_are_generated_owner_only_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "tokens.json"
    first = ensure_embedded_tokens(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(json.loads(path.read_text())) == {r.value for r in Role}
    second = ensure_embedded_tokens(path)
    for role in Role:
        assert first.token_for(role) == second.token_for(role)
    assert len({first.token_for(r) for r in Role}) == 3


def test_world_readable_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    ensure_embedded_tokens(path)
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        ensure_embedded_tokens(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "JSON object"),
        ('{"admin": "x"}', "unknown role"),
        ('{"world": 3}', "a token or a list of tokens"),
        ("{", "unreadable"),
        (
            '{"world": [{"tenants": ["t"]}]}',
            r"world\[0\] must be a token string or an object with a string 'token'",
        ),
        (
            '{"world": [{"token": "' + "w" * 24 + '", "tenant": ["t"]}]}',
            r"world\[0\] has unknown keys \['tenant'\]",
        ),
        (
            '{"world": {"token": "' + "w" * 24 + '", "worlds": []}}',
            r"world\[0\]\.worlds must be a non-empty list",
        ),
        ('{"operator": {"token": "' + "o" * 24 + '", "tenants": ["t"]}}', "only world tokens can be scoped"),
    ],
)
def test_malformed_token_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        TokenStore.load(path)


def test_a_scoped_world_token_carries_its_tenants_and_worlds(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    scoped, plain = "s" * 24, "p" * 24
    path.write_text(
        json.dumps(
            {"world": [{"token": scoped, "tenants": ["studio-a"], "worlds": ["hamlet-*", "mill"]}, plain]}
        )
    )
    store = TokenStore.load(path)
    principal = store.principal_of(f"Bearer {scoped}")
    assert principal.scope == Scope(frozenset({"studio-a"}), ("hamlet-*", "mill"))
    assert store.principal_of(f"Bearer {plain}").scope.unrestricted
    assert store.token_for(Role.WORLD) == scoped


def test_a_scope_holds_its_tenants_its_worlds_and_the_worlds_a_prefix_names() -> None:
    scope = Scope(frozenset({"studio-a"}), ("hamlet-*", "mill"))
    assert [scope.holds_world(w) for w in ("hamlet-7", "hamlet-", "mill", "mill-2", "hamlet")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert [scope.holds_tenant(t) for t in ("studio-a", "studio-b", "")] == [True, False, False]
    assert Scope(None, ("mill",)).holds_tenant("anyone")
    assert Scope(frozenset({"studio-a"})).holds_world("anywhere")
