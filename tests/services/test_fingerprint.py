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


def test_a_non_ascii_value_fingerprints_over_its_utf8_bytes() -> None:
    """Non-ASCII text is encoded as UTF-8, never escaped: a config's fingerprint never changes with it."""
    value = {"locale": "de-DE", "greeting": "Grüß dich, 你好"}
    assert canonical_json(value) == '{"greeting":"Grüß dich, 你好","locale":"de-DE"}'.encode()
    assert fingerprint(value) == "9b026ddd1aa55359"
