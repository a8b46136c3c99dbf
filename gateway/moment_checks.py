"""The limits a call's moment is held to at Submit: the situation text's, as perception.proto states them.

The moment travels from the world through the kernel to cognition as untrusted data; the gateway is
where it enters a run, so it is checked here whole before anything is admitted.
"""

from __future__ import annotations

from egbe.v1 import action_pb2
from services.errors import FieldViolation, InvalidArgument

NAME_CHARS = 128  # ids, names, a place
LINE_CHARS = 600  # a spoken line, a crossroads prompt, an irreversible action
OPTION_CHARS = 240
MAX_OPTIONS = 8
MAX_NEARBY = 16


def text_violations(field: str, value: str, limit: int) -> list[FieldViolation]:
    """No NUL characters (PostgreSQL text cannot hold them) and at most `limit` characters (0 = any)."""
    violations = []
    if "\x00" in value:
        violations.append(FieldViolation(field, "must not contain NUL characters"))
    if 0 < limit < len(value):
        violations.append(FieldViolation(field, f"must be at most {limit} characters"))
    return violations


def _count_violation(field: str, count: int, limit: int) -> list[FieldViolation]:
    return [FieldViolation(field, f"must have at most {limit} entries")] if count > limit else []


def check_moment(moment: action_pb2.CallMoment, prefix: str) -> None:
    """Every text of the moment against its limit, and the kernel's words against NUL; INVALID_ARGUMENT
    names each field refused."""
    situation, at = moment.situation, f"{prefix}situation."
    line, crossroads = situation.player_line, situation.crossroads
    texts = [
        (f"{at}player_line.speaker_id", line.speaker_id, NAME_CHARS),
        (f"{at}player_line.speaker_name", line.speaker_name, NAME_CHARS),
        (f"{at}player_line.text", line.text, LINE_CHARS),
        (f"{at}crossroads.crossroads_id", crossroads.crossroads_id, NAME_CHARS),
        (f"{at}crossroads.prompt", crossroads.prompt, LINE_CHARS),
        *((f"{at}crossroads.options[{i}]", o, OPTION_CHARS) for i, o in enumerate(crossroads.options)),
        (f"{at}irreversible_action", situation.irreversible_action, LINE_CHARS),
        (f"{at}place", situation.place, NAME_CHARS),
        *((f"{at}nearby[{i}]", name, NAME_CHARS) for i, name in enumerate(situation.nearby)),
        (f"{prefix}emotion", moment.emotion, 0),
        (f"{prefix}goal", moment.goal, 0),
        (f"{prefix}plan_step_name", moment.plan_step_name, 0),
        *((f"{prefix}guards[{i}]", guard, 0) for i, guard in enumerate(moment.guards)),
    ]
    violations = [v for field, value, limit in texts for v in text_violations(field, value, limit)]
    violations += _count_violation(f"{at}crossroads.options", len(crossroads.options), MAX_OPTIONS)
    violations += _count_violation(f"{at}nearby", len(situation.nearby), MAX_NEARBY)
    if violations:
        raise InvalidArgument(violations)
