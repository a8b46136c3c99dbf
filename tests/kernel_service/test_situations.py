"""Situation text on a batch: refused whole when malformed; a player's line issues a dialogue call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, _write_varint, read_records, replay
from services.errors import InvalidArgument
from tests.kernel_service.frames import CORES, WORLD, columns, frame, make_kernel, registrations, rows
from world.story import cognition_results, speech_of

AGENTS = 6
DIALOGUE = action_pb2.COGNITION_CAUSE_DIALOGUE
Situation = perception_pb2.SituationText


def line(slot: int, text: str = "Good morning, Kunle.") -> Situation:
    return Situation(
        slot=slot,
        player_line=perception_pb2.SpokenLine(speaker_id="player-1", speaker_name="the traveller", text=text),
    )


def with_situations(
    batch: perception_pb2.PerceptionBatch, *situations: Situation
) -> perception_pb2.PerceptionBatch:
    batch.situations.extend(situations)
    return batch


def full(tick: int, **arrays: np.ndarray) -> perception_pb2.PerceptionBatch:
    return columns(tick, signal_flags=np.zeros(AGENTS, np.uint16), **arrays)


Edit = Callable[[Situation], None]


def _set(path: str, value: object) -> Edit:
    def edit(situation: Situation) -> None:
        *parents, name = path.split(".")
        target = situation
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)

    return edit


def _extend(path: str, values: list[str]) -> Edit:
    def edit(situation: Situation) -> None:
        target = situation
        for part in path.split("."):
            target = getattr(target, part)
        target.extend(values)  # type: ignore[attr-defined]

    return edit


REFUSALS: list[tuple[str, Edit]] = [
    ("slot", _set("slot", AGENTS)),
    ("player_line.speaker_id", _set("player_line.speaker_id", "p" * 129)),
    ("player_line.speaker_name", _set("player_line.speaker_name", "n" * 129)),
    ("player_line.text", _set("player_line.text", "w" * 601)),
    ("player_line.text", _set("player_line.text", "hello\x00there")),
    ("player_line.text", _set("player_line.text", "a bell\x07")),
    ("crossroads.crossroads_id", _set("crossroads.crossroads_id", "c" * 129)),
    ("crossroads.prompt", _set("crossroads.prompt", "p" * 601)),
    ("crossroads.options", _extend("crossroads.options", ["stay"] * 9)),
    ("crossroads.options[1]", _extend("crossroads.options", ["stay", "o" * 241])),
    ("crossroads.options[0]", _extend("crossroads.options", ["go\x1b[2J"])),
    ("irreversible_action", _set("irreversible_action", "i" * 601)),
    ("place", _set("place", "p" * 129)),
    ("place", _set("place", "the forge\x7f")),
    ("place", _set("place", "the forge\x85")),
    ("nearby", _extend("nearby", ["Tobi"] * 17)),
    ("nearby[2]", _extend("nearby", ["Tobi", "Ireti", "n" * 129])),
]


@pytest.mark.parametrize("encoding", ["rows", "columns"])
@pytest.mark.parametrize(("field", "edit"), REFUSALS)
def test_a_bad_situation_refuses_the_whole_batch_naming_the_field(
    encoding: str, field: str, edit: Edit
) -> None:
    kernel = make_kernel(AGENTS)
    kernel.tick(full(1))
    before = kernel.snapshot()
    bad = line(3)
    edit(bad)
    batch = full(2) if encoding == "columns" else rows(2, [frame(s) for s in range(AGENTS)])
    with_situations(batch, line(1), Situation(slot=2, place="the forge"), bad)
    with pytest.raises(InvalidArgument) as refused:
        kernel.tick(batch)
    assert [v.field for v in refused.value.violations] == [f"batch.situations[2].{field}"]
    assert kernel.snapshot() == before
    assert kernel.last_tick == 1


def test_a_slot_given_twice_is_refused() -> None:
    kernel = make_kernel(AGENTS)
    with pytest.raises(InvalidArgument) as refused:
        kernel.tick(with_situations(full(1), line(4), Situation(slot=4, place="the well")))
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("batch.situations[1].slot", "slot 4 already has a situation in this batch")
    ]
    assert kernel.last_tick is None


def test_text_at_every_limit_with_newlines_and_tabs_is_taken() -> None:
    kernel = make_kernel(AGENTS)
    situation = Situation(
        slot=5,
        player_line=perception_pb2.SpokenLine(
            speaker_id="p" * 128, speaker_name="n" * 128, text="line one\n\tline two" + "w" * 582
        ),
        crossroads=perception_pb2.CrossroadsText(
            crossroads_id="c" * 128, prompt="p" * 600, options=["o" * 240] * 8
        ),
        irreversible_action="i" * 600,
        place="Adaeze's forge, by the river ✓" + "p" * 98,
        nearby=["n" * 128] * 16,
    )
    assert len(situation.player_line.text) == 600
    assert len(situation.place) == 128
    result = kernel.tick(with_situations(full(1), situation))
    assert [(c.slot, c.cause) for c in result.candidates if c.slot == 5] == [(5, DIALOGUE)]


@pytest.mark.parametrize("core", CORES)
def test_a_line_issues_one_dialogue_call_at_the_ori_tier(core: str) -> None:
    config = KernelConfig()
    kernel = make_kernel(AGENTS, core, config)
    # Slot 1 is Lachesis (a player nearby in the world), the others Atropos; Atropos summaries are
    # staggered by slot, so tick 6 issues the summary of slot 4 and nothing for slot 1.
    flags = np.zeros(AGENTS, np.uint16)
    flags[1] = 1 << perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD
    for tick in range(1, 6):
        kernel.tick(columns(tick, signal_flags=flags))
    result = kernel.tick(
        with_situations(
            columns(6, signal_flags=flags),
            line(1, "Will you walk with me?"),
            line(4),
            Situation(slot=2, place="the well"),  # text without a line issues nothing
            line(3, ""),
        )
    )
    lachesis, atropos = common_pb2.COGNITION_TIER_LACHESIS, common_pb2.COGNITION_TIER_ATROPOS
    assert kernel.arrays.live("tier").tolist() == [atropos, lachesis, atropos, atropos, atropos, atropos]
    calls = [(c.slot, c.cause, c.tier, c.call_id) for c in result.candidates]
    assert calls == [
        (4, DIALOGUE, atropos, f"{WORLD}:6:4:{DIALOGUE}"),  # the core's summary call, now a dialogue
        (1, DIALOGUE, lachesis, f"{WORLD}:6:1:{DIALOGUE}"),
    ]
    tokens = config.context_chars.dialogue // 4 + config.batch_overhead_tokens
    assert [c.token_estimate for c in result.candidates] == [tokens, tokens]
    assert [c.cost_estimate_micro_usd for c in result.candidates] == [
        (tokens * config.class_rate(atropos) + 999) // 1000,
        (tokens * config.class_rate(lachesis) + 999) // 1000,
    ]
    assert [c.model_route for c in result.candidates] == [
        config.tier_models["atropos"],
        config.tier_models["lachesis"],
    ]
    assert not any(c.batch_group for c in result.candidates)
    assert result.report.calls_issued == 2
    assert result.report.estimated_tokens == 2 * tokens
    # The situation applies to its tick only: the next tick calls as it would have.
    after = kernel.tick(columns(7, signal_flags=flags))
    assert [(c.slot, c.cause) for c in after.candidates] == [(5, action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY)]


def test_both_cores_answer_a_dialogue_tick_identically() -> None:
    results = []
    for core in CORES:
        kernel = make_kernel(AGENTS, core, behavior=True)
        kernel.tick(full(1))
        result = kernel.tick(with_situations(full(2), line(0), line(5)))
        result.report.core = ""
        result.report.elapsed_micros = 0
        result.report.ClearField("config_fingerprint")
        results.append(result.SerializeToString(deterministic=True))
    assert results[0] == results[1]


def _said(slot: int, text: str) -> action_pb2.ActionIntent:
    intent = action_pb2.ActionIntent(
        slot=slot, kind=action_pb2.ACTION_KIND_SAY, source=action_pb2.ACTION_SOURCE_COGNITION, priority=7_000
    )
    intent.payload.update({"mode": "dialogue", "speech": {"text": text}, "dispatch_us": 1234})
    return intent


@pytest.mark.parametrize("core", CORES)
def test_a_merged_reply_is_said_on_the_merge_tick_even_under_a_new_call(core: str) -> None:
    kernel = make_kernel(AGENTS, core)
    flags = np.full(AGENTS, 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN, np.uint16)
    kernel.tick(columns(1, signal_flags=flags))
    # Every Ori is Clotho, planned every 5 ticks, staggered: slot 2 on ticks 3, 8 and 13, as its
    # reply merges.
    merged = [_said(2, "Aye, I will.")]
    result = kernel.tick(columns(3, signal_flags=flags), merged)
    assert [(c.slot, c.cause) for c in result.candidates] == [
        (2, action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING)
    ]
    kinds = np.frombuffer(result.actions.columns.kind, np.uint8)
    assert int(kinds[2]) == action_pb2.ACTION_KIND_SAY
    assert kinds.tolist().count(action_pb2.ACTION_KIND_SAY) == 1
    assert [(p.slot, p.payload["speech"]["text"]) for p in result.actions.columns.payloads] == [
        (2, "Aye, I will.")
    ]
    # Rows and deltas answer the same way.
    rows_result = kernel.tick(rows(8, [frame(s, on_screen=True) for s in range(AGENTS)]), merged)
    assert [c.slot for c in rows_result.candidates] == [2]
    said = [i for i in rows_result.actions.intents if i.slot == 2]
    assert [(i.kind, i.payload["speech"]["text"], i.payload["dispatch_us"]) for i in said] == [
        (action_pb2.ACTION_KIND_SAY, "Aye, I will.", 1234)
    ]
    delta = kernel.tick(columns(13, slots=np.array([0]), signal_flags=flags[:1]), merged)
    assert [c.slot for c in delta.candidates] == [2]
    slots = np.frombuffer(delta.actions.columns.slots, "<u4").tolist()
    kinds = np.frombuffer(delta.actions.columns.kind, np.uint8).tolist()
    assert kinds[slots.index(2)] == action_pb2.ACTION_KIND_SAY


def test_a_reply_wins_over_another_result_for_its_slot() -> None:
    kernel = make_kernel(AGENTS)
    kernel.tick(full(1))
    decided = action_pb2.ActionIntent(slot=3, kind=action_pb2.ACTION_KIND_WORK)
    decided.payload.update({"mode": "decision"})
    result = kernel.tick(rows(2, [frame(3)]), [_said(3, "Not now."), decided])
    [intent] = result.actions.intents
    assert (intent.kind, intent.payload["speech"]["text"]) == (action_pb2.ACTION_KIND_SAY, "Not now.")


@pytest.mark.parametrize("core", CORES)
def test_a_reply_merged_as_a_guard_fires_reaches_the_world_as_the_oris_reply(core: str) -> None:
    """The stale-goal guard fires on the sixth tick a Lachesis Ori holds goal 77 without progress;
    the reply merged on that tick is still the Ori's cognition SAY, which the world reads as a reply."""
    kernel = make_kernel(1, core)
    held = [frame(0, player_nearby_in_world=True, goal_ref=77)]
    for tick in range(1, 6):
        kernel.tick(rows(tick, held))
    reply = _said(0, "Aye, I will open it.")
    reply.payload["run_id"] = "run-1"
    result = kernel.tick(rows(6, held), [reply])
    assert result.report.guard_interventions == 1
    [intent] = result.actions.intents
    assert (intent.kind, intent.source) == (action_pb2.ACTION_KIND_SAY, action_pb2.ACTION_SOURCE_COGNITION)
    heard = [speech_of(r) for r in cognition_results(result.actions)]
    assert [(s.slot, s.text, s.run_id) for s in heard if s is not None] == [
        (0, "Aye, I will open it.", "run-1")
    ]


def test_a_logged_dialogue_tick_replays_to_the_same_digest(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    kernel = Kernel(KernelConfig(), select_core("c"))
    writer = TickLogWriter(log, kernel, snapshot_every_ticks=3)
    request = kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS))
    kernel.register(request.world_id, request.agents)
    writer.record_registration(request)
    for tick in range(1, 8):
        batch = full(tick)
        if tick in (2, 5):
            with_situations(batch, line(tick % AGENTS, f"Line at tick {tick}"))
        merged = [_said(1, "Yes.")] if tick == 4 else []
        result = kernel.tick(batch, merged)
        writer.record_tick(batch, merged, result, kernel)
    writer.close()
    logged = [r.tick for r in read_records(log) if r.WhichOneof("entry") == "tick"]
    assert [len(t.batch.situations) for t in logged] == [0, 1, 0, 0, 1, 0, 0]
    report = replay(log, Kernel(KernelConfig(), select_core("numpy")))
    assert report.identical
    assert report.ticks == 7
    # A different line on the logged tick is a different result.
    records = list(read_records(log))
    for record in records:
        if record.WhichOneof("entry") == "tick" and record.tick.batch.tick == 5:
            record.tick.batch.situations[0].slot = 3
    tampered = tmp_path / "tampered.log"
    with tampered.open("wb") as stream:
        for record in records:
            data = record.SerializeToString(deterministic=True)
            _write_varint(stream, len(data))
            stream.write(data)
    assert replay(tampered, Kernel(KernelConfig(), select_core("c"))).first_divergent_tick == 5
