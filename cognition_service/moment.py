"""The moment a call was issued in, for the prompt: what the Ori perceives, what it was told, what it is for.

The kernel's dispatcher attaches a CallMoment to each call: the world's situation text (a player's
line, a crossroads, an irreversible action, place, who is near) and the Ori's state at the issuing
tick. Here it becomes ranked perception items, the steward-input lines and, when the request names no
objectives, the objectives the moment implies, most urgent first. Everything stays untrusted data.
"""

from __future__ import annotations

from cognition_service.context import RankedItem
from cognition_service.identity import NEED_WORDS, baseline_levels, needs_words, percent
from egbe.v1 import action_pb2, biography_pb2

NO_PLAYER_MM = 2_147_483_647
# Perception priorities: danger first, then who is addressing the Ori, then the scene.
THREAT_BP, MINOR_BP, PLAYER_BP, GUARD_BP = 10_000, 9_500, 9_000, 8_500
PLACE_BP, NEARBY_BP, EMOTION_BP, NEEDS_BP = 8_000, 7_500, 7_000, 6_500
# Objective priorities: the words in front of the Ori before its own plans.
ANSWER_BP, IRREVERSIBLE_BP, CROSSROADS_BP = 10_000, 9_800, 9_600
GOAL_BP, STEP_BP, VOCATION_BP = 8_000, 7_500, 5_000
NEED_CAP_BP = 7_000  # a pressing need ranks below the goal it competes with, above daily work


def speaker_of(moment: action_pb2.CallMoment) -> tuple[str, str]:
    """The speaker of the line the Ori heard (id, name); empty when none was said."""
    line = moment.situation.player_line
    if not line.text:
        return "", ""
    return line.speaker_id, line.speaker_name or line.speaker_id


def _needs(moment: action_pb2.CallMoment) -> list[tuple[str, int]]:
    levels = [(name, getattr(moment, f"need_{name}_bp")) for name in NEED_WORDS if name != "fatigue"]
    return [*levels, ("fatigue", moment.fatigue_bp)]


def perception_items(moment: action_pb2.CallMoment) -> list[RankedItem]:
    situation = moment.situation
    items = []
    if moment.threat_present:
        items.append(RankedItem("moment:threat", "a threat is near", THREAT_BP))
    if moment.minor_present:
        items.append(RankedItem("moment:minor", "a child is near", MINOR_BP))
    if moment.player_proximity_mm != NO_PLAYER_MM:
        metres = moment.player_proximity_mm / 1_000
        items.append(RankedItem("moment:player", f"the player is {metres:.1f} m away", PLAYER_BP))
    for guard in moment.guards:
        items.append(RankedItem(f"moment:guard:{guard}", f"guard fired: {guard}", GUARD_BP))
    if situation.place:
        items.append(RankedItem("moment:place", f"place: {situation.place}", PLACE_BP))
    if situation.nearby:
        items.append(RankedItem("moment:nearby", f"near me: {', '.join(situation.nearby)}", NEARBY_BP))
    if moment.emotion:
        items.append(RankedItem("moment:emotion", f"emotion: {moment.emotion}", EMOTION_BP))
    items.append(RankedItem("moment:needs", f"needs now: {needs_words(_needs(moment))}", NEEDS_BP))
    return items


def stimulus_lines(moment: action_pb2.CallMoment) -> list[str]:
    """What was put to the Ori this tick, one fact a line."""
    situation = moment.situation
    lines = []
    speaker_id, speaker_name = speaker_of(moment)
    if speaker_id or speaker_name:
        lines.append(f"{speaker_name} ({speaker_id}) says: {situation.player_line.text}")
    crossroads = situation.crossroads
    if crossroads.prompt or crossroads.options:
        lines.append(f"crossroads {crossroads.crossroads_id}: {crossroads.prompt}".rstrip())
        lines += [f"option {i}: {option}" for i, option in enumerate(crossroads.options, 1)]
    if situation.irreversible_action:
        lines.append(f"irreversible action: {situation.irreversible_action}")
    return lines


def derived_objectives(
    moment: action_pb2.CallMoment | None, identity: biography_pb2.OriIdentity
) -> list[RankedItem]:
    """What the Ori is for now, when the request names nothing: answer, decide, its goal, work, needs."""
    items = []
    if moment is not None:
        situation = moment.situation
        speaker_id, speaker_name = speaker_of(moment)
        if speaker_id or speaker_name:
            items.append(RankedItem("objective:answer", f"answer {speaker_name}", ANSWER_BP))
        if situation.irreversible_action:
            items.append(
                RankedItem("objective:irreversible", "respond to the irreversible action", IRREVERSIBLE_BP)
            )
        if situation.crossroads.prompt or situation.crossroads.options:
            items.append(RankedItem("objective:crossroads", "decide at the crossroads", CROSSROADS_BP))
        if moment.goal:
            items.append(RankedItem("objective:goal", f"pursue my goal: {moment.goal}", GOAL_BP))
        if moment.plan_step_name:
            items.append(RankedItem("objective:step", f"carry on with: {moment.plan_step_name}", STEP_BP))
    if identity.vocation:
        article = "an" if identity.vocation[:1].lower() in "aeiou" else "a"
        work = f"do my work as {article} {identity.vocation}"
        items.append(RankedItem("objective:work", work, VOCATION_BP))
    levels = _needs(moment) if moment is not None else []
    if not any(bp for _, bp in levels) and identity.HasField("needs"):
        levels = baseline_levels(identity.needs)
    if any(bp for _, bp in levels):
        name, bp = max(levels, key=lambda level: level[1])
        items.append(
            RankedItem(
                f"objective:need:{name}",
                f"tend to my need for {NEED_WORDS[name]} ({percent(bp)})",
                min(bp, NEED_CAP_BP),
            )
        )
    return items
