"""Identity registration on both backends: registered, unchanged, changed, rehydrated, raced, at scale."""

from __future__ import annotations

import asyncio
import time

import pytest
from google.protobuf import json_format

from biography_service.appending import AppendRequest
from biography_service.consolidation import Fragment
from biography_service.errors import WrongExpectedVersion
from biography_service.events import ANY, NO_STREAM, AppendResult, EventKind, exact
from biography_service.identity import Outcome
from biography_service.rehydration import LoadBudget
from biography_service.service import Biography
from egbe.v1 import biography_pb2
from tests.biography.events_for_tests import event, memories, memory
from tests.biography.identities_for_tests import identity, registration_message, registrations

ROOMY = LoadBudget(max_events=100, max_chars=100_000)
SOLO_CEILING_ORI = 1_424


def _as_dict(message: biography_pb2.OriIdentity) -> dict[str, object]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


async def test_a_first_identity_opens_the_stream_and_rehydrates(biography: Biography) -> None:
    [answer] = await biography.register_identities(registrations(registration_message("ori-a", tick=12)))
    assert (answer.ori_id, answer.identity_version, answer.outcome, answer.stream_version) == (
        "ori-a",
        1,
        Outcome.REGISTERED,
        0,
    )
    [opened] = (await biography.read("ori-a", None, 10)).events
    assert opened.kind is EventKind.IDENTITY_REGISTERED
    assert opened.world_tick == 12
    assert opened.payload == {**_as_dict(identity()), "identity_version": 1}
    context = await biography.rehydrate("ori-a", ROOMY)
    assert context.identity == _as_dict(identity())
    assert context.identity_version == 1
    assert (await biography.verify_chain("ori-a")).intact


async def test_the_same_identity_again_writes_nothing_and_answers_unchanged(biography: Biography) -> None:
    await biography.register_identities(registrations(registration_message("ori-a")))
    await biography.append("ori-a", ANY, memories(2))
    [again] = await biography.register_identities(registrations(registration_message("ori-a", tick=99)))
    assert (again.identity_version, again.outcome, again.stream_version) == (1, Outcome.UNCHANGED, 0)
    assert [e.kind for e in (await biography.read("$all", 0, 100)).events] == [
        EventKind.IDENTITY_REGISTERED,
        EventKind.MEMORY_FORMED,
        EventKind.MEMORY_FORMED,
    ]


async def test_a_different_identity_is_a_change_with_the_next_version(biography: Biography) -> None:
    await biography.register_identities(registrations(registration_message("ori-a")))
    await biography.append("ori-a", ANY, memories(1))
    changed = identity(vocation="bellfounder")
    [answer] = await biography.register_identities(registrations(registration_message("ori-a", changed)))
    assert (answer.identity_version, answer.outcome, answer.stream_version) == (2, Outcome.CHANGED, 2)
    latest = (await biography.read("ori-a", None, 10, backward=True)).events[0]
    assert latest.kind is EventKind.IDENTITY_CHANGED
    assert latest.payload == {**_as_dict(changed), "identity_version": 2}
    context = await biography.rehydrate("ori-a", ROOMY)
    assert context.identity == _as_dict(changed)
    assert context.identity_version == 2
    # Back to the first identity is a change too (version 3), not a repeat of version 1.
    [back] = await biography.register_identities(registrations(registration_message("ori-a")))
    assert (back.identity_version, back.outcome) == (3, Outcome.CHANGED)


async def test_an_identity_registered_after_other_events_follows_them(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, memories(3))
    answers = await biography.register_identities(
        registrations(registration_message("ori-a"), registration_message("ori-b", identity("Tobi")))
    )
    assert [(a.ori_id, a.outcome, a.stream_version) for a in answers] == [
        ("ori-a", Outcome.REGISTERED, 3),
        ("ori-b", Outcome.REGISTERED, 0),
    ]
    assert (await biography.rehydrate("ori-b", ROOMY)).identity == _as_dict(identity("Tobi"))


async def test_racing_registrations_of_one_ori_write_one_first_version(biography: Biography) -> None:
    contenders = [identity(vocation=f"trade {i}") for i in range(4)]
    answers = await asyncio.gather(
        *(biography.register_identities(registrations(registration_message("ori-a", c))) for c in contenders)
    )
    events = (await biography.read("ori-a", None, 50)).events
    assert [e.kind for e in events] == [EventKind.IDENTITY_REGISTERED] + [EventKind.IDENTITY_CHANGED] * 3
    assert [e.payload["identity_version"] for e in events] == [1, 2, 3, 4]
    assert sorted(a.identity_version for [a] in answers) == [1, 2, 3, 4]
    same = await asyncio.gather(
        *(biography.register_identities(registrations(registration_message("ori-b"))) for _ in range(4))
    )
    assert len((await biography.read("ori-b", None, 50)).events) == 1
    assert sorted(a.outcome for [a] in same) == [Outcome.REGISTERED] + [Outcome.UNCHANGED] * 3


async def test_values_follow_the_latest_event_that_set_them(biography: Biography) -> None:
    first = identity(
        values=[
            biography_pb2.ValueItem(value_ref="craft", weight_bp=9000),
            biography_pb2.ValueItem(value_ref="kinship", weight_bp=6000),
            biography_pb2.ValueItem(value_ref="honesty", weight_bp=4000),
        ]
    )
    await biography.register_identities(registrations(registration_message("ori-a", first)))
    assert [(v.value_ref, v.weight_bp) for v in (await biography.rehydrate("ori-a", ROOMY)).values] == [
        ("craft", 9000),
        ("kinship", 6000),
        ("honesty", 4000),
    ]
    await biography.append(
        "ori-a", ANY, [event(EventKind.VALUE_SHIFT, {"value_ref": "craft", "weight_bp": 3000})]
    )
    second = identity(
        values=[
            biography_pb2.ValueItem(value_ref="kinship", weight_bp=7000),
            biography_pb2.ValueItem(value_ref="joy", weight_bp=5000),
        ]
    )
    await biography.register_identities(registrations(registration_message("ori-a", second)))
    # kinship and joy: the new identity; craft: the later shift survives an identity that omits it;
    # honesty: only the first identity set it, and the second dropped it.
    assert [(v.value_ref, v.weight_bp) for v in (await biography.rehydrate("ori-a", ROOMY)).values] == [
        ("kinship", 7000),
        ("joy", 5000),
        ("craft", 3000),
    ]


async def test_append_many_decides_each_request_and_writes_the_rest_in_one_transaction(
    biography: Biography,
) -> None:
    await biography.append("ori-b", NO_STREAM, memories(2))
    outcomes = await biography.store.append_many(
        [
            AppendRequest("ori-a", NO_STREAM, memories(2, "a")),
            AppendRequest("ori-b", exact(0), memories(1, "stale")),
            AppendRequest("ori-c", NO_STREAM, memories(1, "c")),
        ]
    )
    assert isinstance(outcomes[0], AppendResult)
    assert (outcomes[0].last_version, outcomes[0].first_global_position) == (1, 3)
    assert isinstance(outcomes[1], WrongExpectedVersion)
    assert outcomes[1].actual == 1
    assert isinstance(outcomes[2], AppendResult)
    assert outcomes[2].first_global_position == 5
    assert [e.ori_id for e in (await biography.read("$all", 0, 100)).events] == ["ori-b"] * 2 + [
        "ori-a",
        "ori-a",
        "ori-c",
    ]
    heads = await biography.store.identity_heads(["ori-a", "ori-b", "ori-none"])
    assert {o: (h.stream_version, h.identity) for o, h in heads.items()} == {
        "ori-a": (1, None),
        "ori-b": (1, None),
    }


async def test_repeated_memories_fold_into_one_counted_item(biography: Biography) -> None:
    repeats = [
        memory("Fed the hens", 3000, tick=1),
        memory("the storm took the roof", 9000, tick=2),
        memory("  fed the   HENS ", 7000, tick=3),
        memory("fed the hens", 2000, tick=4),
    ]
    await biography.append("ori-a", NO_STREAM, repeats)
    context = await biography.rehydrate("ori-a", ROOMY)
    assert [(m.ref, m.text, m.salience_bp, m.world_tick) for m in context.memories] == [
        (repeats[1].event_id, "the storm took the roof", 9000, 2),
        (repeats[3].event_id, "fed the hens (×3)", 7000, 4),
    ]
    assert context.omitted == {}
    tight = await biography.rehydrate("ori-a", LoadBudget(max_events=1, max_chars=100_000))
    assert tight.omitted == {"memories": 1}


async def test_consolidation_folds_repeated_fragments_and_accounts_for_every_one(
    biography: Biography,
) -> None:
    fragments = [
        Fragment("f1", EventKind.MEMORY_FORMED, {"text": "Swept the yard", "salience_bp": 1000}, 1),
        Fragment("f2", EventKind.MEMORY_FORMED, {"text": "saw a heron", "salience_bp": 8000}, 2),
        Fragment("f3", EventKind.MEMORY_FORMED, {"text": "swept the  yard", "salience_bp": 4000}, 3),
        Fragment("f4", EventKind.MEMORY_FORMED, {"text": "swept the yard", "salience_bp": 2000}, 4),
    ]
    done = await biography.consolidate("ori-a", fragments, "day-1")
    assert done.report.no_state_loss
    [folded] = done.events
    assert folded.payload["fragments"] == [
        {
            "fragment_id": "f4",
            "world_tick": 4,
            "payload": {"text": "swept the yard", "salience_bp": 4000},
            "count": 3,
            "repeat_fragment_ids": ["f1", "f3"],
        },
        {"fragment_id": "f2", "world_tick": 2, "payload": {"text": "saw a heron", "salience_bp": 8000}},
    ]
    context = await biography.rehydrate("ori-a", ROOMY)
    assert [(m.ref, m.text) for m in context.memories] == [
        ("f2", "saw a heron"),
        ("f4", "swept the yard (×3)"),
    ]
    # A later event of the same fact adds to the count.
    await biography.append("ori-a", ANY, [memory("Swept the yard.", 100), memory("swept the yard", 100)])
    assert (await biography.rehydrate("ori-a", ROOMY)).memories[1].text == "swept the yard (×4)"


async def test_the_solo_ceiling_registers_in_one_call(biography: Biography, backend: str) -> None:
    batch = registrations(
        *(
            registration_message(f"ori-{i:04d}", identity(f"Ori {i}", vocation="farmer"))
            for i in range(SOLO_CEILING_ORI)
        )
    )
    started = time.perf_counter()
    answers = await biography.register_identities(batch)
    elapsed = time.perf_counter() - started
    print(f"\n{backend}: registered {SOLO_CEILING_ORI} identities in one call in {elapsed * 1000:.0f} ms")
    assert [a.outcome for a in answers] == [Outcome.REGISTERED] * SOLO_CEILING_ORI
    assert len((await biography.read("$all", 0, 2000)).events) == SOLO_CEILING_ORI
    started = time.perf_counter()
    again = await biography.register_identities(batch)
    unchanged_ms = (time.perf_counter() - started) * 1000
    print(f"{backend}: the same {SOLO_CEILING_ORI} again (unchanged) in {unchanged_ms:.0f} ms")
    assert {a.outcome for a in again} == {Outcome.UNCHANGED}
    assert (await biography.rehydrate("ori-1423", ROOMY)).identity == _as_dict(
        identity("Ori 1423", vocation="farmer")
    )


async def test_a_stream_that_keeps_moving_is_refused_after_the_attempts_and_nothing_is_written(
    biography: Biography, monkeypatch: pytest.MonkeyPatch
) -> None:
    await biography.register_identities(registrations(registration_message("ori-a")))

    async def stale(ori_ids: object) -> dict[str, object]:
        return {}  # as if every read came before another writer's append

    monkeypatch.setattr(biography.store, "identity_heads", stale)
    with pytest.raises(WrongExpectedVersion) as caught:
        await biography.register_identities(registrations(registration_message("ori-a", identity("Other"))))
    assert caught.value.actual == 0
    assert len((await biography.read("$all", 0, 100)).events) == 1
