"""FNV-1a 64 against its published test vectors."""

from __future__ import annotations

from services.fingerprint import canonical_json, fingerprint, fnv1a64


def test_fnv1a64_vectors() -> None:
    assert fnv1a64(b"") == "cbf29ce484222325"
    assert fnv1a64(b"a") == "af63dc4c8601ec8c"
    assert fnv1a64(b"foobar") == "85944171f73967e8"


def test_canonical_json_ignores_key_order() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == canonical_json({"a": [1, "é"], "b": 1})
    assert fingerprint({"b": 1, "a": 2}) == fingerprint({"a": 2, "b": 1})
