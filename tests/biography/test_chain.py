"""The link hash's encoding is a stored format: it must not drift, or every existing chain breaks."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from biography_service.chain import GENESIS_HASH, StreamLinker, link_hash
from biography_service.events import EventKind, NewEvent, canonical_json

# Hashed by the first release (generic `json.dumps` of the field list); awkward text on purpose.
RECORDED = {
    "previous_hash": GENESIS_HASH,
    "event_id": "6f1c2a5e-0b7d-4c3e-9a41-2f8d1e6b7c90",
    "ori_id": 'ori-ẞ "quoted"\n',
    "stream_version": 0,
    "global_position": 1,
    "kind": "MemoryFormed",
    "payload_json": '{"salience_bp":9000.0,"text":"the river \\"flooded\\" 🌊"}',
    "world_tick": 1440,
    "recorded_at_us": 1_764_460_800_000_000,
    "provenance_ref": "bundle:7\t",
}
RECORDED_HASH = "1181de1dab60e79b03a863c854f509c79621eda0f22e5fb612f3c5f1e33c96e2"
ORDER = tuple(RECORDED)


def test_a_hash_recorded_by_the_first_release_still_verifies() -> None:
    assert link_hash(**RECORDED) == RECORDED_HASH


@given(
    texts=st.lists(st.text(), min_size=6, max_size=6),
    numbers=st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=4, max_size=4),
)
def test_the_encoding_is_the_compact_json_array_of_the_fields(texts: list[str], numbers: list[int]) -> None:
    fields = dict(zip(ORDER, [*texts[:3], *numbers[:2], *texts[3:5], *numbers[2:], texts[5]], strict=True))
    documented = json.dumps([fields[name] for name in ORDER], separators=(",", ":"), ensure_ascii=False)
    assert link_hash(**fields) == hashlib.sha256(documented.encode("utf-8")).hexdigest()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(payload=st.dictionaries(st.text(), _JSON, max_size=6))
def test_the_canonical_payload_is_the_documented_json_text(payload: dict[str, object]) -> None:
    # The payload text is hashed and stored: the fast path must give exactly `json.dumps`'s text.
    documented = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical_json(payload) == documented


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_canonical_payload_refuses_non_finite_numbers(bad: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"nested": [{"x": bad}]})


@given(
    ori_id=st.text(),
    head_hash=st.text(),
    events=st.lists(
        st.tuples(st.sampled_from(list(EventKind)), st.text(), st.text(), st.integers(0, 2**63 - 1)),
        min_size=1,
        max_size=5,
    ),
)
def test_a_streams_linker_gives_link_hashs_chain(
    ori_id: str, head_hash: str, events: list[tuple[EventKind, str, str, int]]
) -> None:
    # The append path's linker quotes once what repeats; the chain must be byte for byte link_hash's.
    linker = StreamLinker(ori_id, head_hash, 1_764_460_800_000_000)
    previous = head_hash
    for version, (kind, text, provenance, tick) in enumerate(events):
        new = NewEvent(f"id-{version}", kind, {"text": text}, tick, provenance)
        expected = link_hash(
            previous_hash=previous,
            event_id=new.event_id,
            ori_id=ori_id,
            stream_version=version,
            global_position=version + 7,
            kind=kind.value,
            payload_json=new.payload_json,
            world_tick=tick,
            recorded_at_us=1_764_460_800_000_000,
            provenance_ref=provenance,
        )
        assert linker.link(new, version, version + 7) == expected
        previous = expected
