"""The world's situation text on a perception batch: checked whole before a tick applies anything.

The text is untrusted prompt content the kernel never parses: it only checks each entry names a
registered slot once, fits the lengths perception.proto states and holds no control characters (a
newline or a tab is fine), then carries it by reference to the calls it issues that tick. A player's
line makes the tick issue a dialogue call for its slot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import perception_pb2
from services.errors import InvalidArgument

NAME_CHARS = 128  # ids, names, a place, a nearby name
TEXT_CHARS = 600  # a line, a prompt, an irreversible action
OPTION_CHARS = 240
MAX_OPTIONS = 8
MAX_NEARBY = 16
# C0 controls but tab (\x09) and newline (\x0a), DEL, and the C1 controls.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Situations:
    """A tick's situation text by slot, and the slots a player's line addresses (ascending)."""

    by_slot: Mapping[int, perception_pb2.SituationText] = field(default_factory=dict)
    dialogue: NDArray[np.uint32] = field(default_factory=lambda: np.empty(0, np.uint32))


NO_SITUATIONS = Situations()


def _check_text(value: str, path: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidArgument.field(path, f"{len(value)} characters; at most {limit}")
    if (bad := _CONTROL.search(value)) is not None:
        raise InvalidArgument.field(
            path, f"control character U+{ord(bad.group()):04X} at {bad.start()} (only newline and tab)"
        )


def _check_list(values: Sequence[str], path: str, most: int, limit: int) -> None:
    if len(values) > most:
        raise InvalidArgument.field(path, f"{len(values)} entries; at most {most}")
    for index, value in enumerate(values):
        _check_text(value, f"{path}[{index}]", limit)


def check_situations(
    situations: Sequence[perception_pb2.SituationText], registered: int, prefix: str = "batch.situations"
) -> Situations:
    """Validate every entry; InvalidArgument names the first bad field, and nothing is kept."""
    by_slot: dict[int, perception_pb2.SituationText] = {}
    for index, situation in enumerate(situations):
        at = f"{prefix}[{index}]"
        slot = situation.slot
        if slot >= registered:
            raise InvalidArgument.field(f"{at}.slot", f"unknown slot {slot}")
        if slot in by_slot:
            raise InvalidArgument.field(f"{at}.slot", f"slot {slot} already has a situation in this batch")
        line = situation.player_line
        _check_text(line.speaker_id, f"{at}.player_line.speaker_id", NAME_CHARS)
        _check_text(line.speaker_name, f"{at}.player_line.speaker_name", NAME_CHARS)
        _check_text(line.text, f"{at}.player_line.text", TEXT_CHARS)
        crossroads = situation.crossroads
        _check_text(crossroads.crossroads_id, f"{at}.crossroads.crossroads_id", NAME_CHARS)
        _check_text(crossroads.prompt, f"{at}.crossroads.prompt", TEXT_CHARS)
        _check_list(crossroads.options, f"{at}.crossroads.options", MAX_OPTIONS, OPTION_CHARS)
        _check_text(situation.irreversible_action, f"{at}.irreversible_action", TEXT_CHARS)
        _check_text(situation.place, f"{at}.place", NAME_CHARS)
        _check_list(situation.nearby, f"{at}.nearby", MAX_NEARBY, NAME_CHARS)
        by_slot[slot] = situation
    dialogue = sorted(slot for slot, situation in by_slot.items() if situation.player_line.text)
    return Situations(by_slot, np.array(dialogue, dtype=np.uint32))
