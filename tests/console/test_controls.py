"""A Controls form becomes exactly one order, checked whole: a bad field is named and nothing is sent."""

from __future__ import annotations

import pytest

from console.controls import BudgetOrder, CapOrder, ControlOrder, OrderInvalid, parse_order


def test_a_kill_form_becomes_its_order_and_its_fields_make_it_again() -> None:
    form = {
        "kind": "control",
        "action": "kill",
        "scope": "ori",
        "target": " adaeze ",
        "world_id": "hamlet-7",
        "reason": "stop her calls",
        "expires_minutes": "30",
    }
    order = parse_order(form)
    assert order == ControlOrder("kill", "ori", "adaeze", "hamlet-7", "stop her calls", 30)
    assert order.describe() == "KILL ori adaeze in world hamlet-7 for 30 min: stop her calls"
    assert parse_order(order.fields()) == order


def test_cap_and_budget_forms_become_their_orders() -> None:
    cap = parse_order({"kind": "cap", "world_id": "w", "tokens_per_hour": "60,000", "reason": "r"})
    assert cap == CapOrder("w", 60_000, "r")
    budget = parse_order({"kind": "budget", "tier": "clotho", "max_tokens": "9000", "reason": "r"})
    assert budget == BudgetOrder("clotho", None, None, 9_000, "r")
    assert parse_order(budget.fields()) == budget


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"kind": "control", "action": "kill", "scope": "ori", "target": "a"}, "reason"),
        ({"kind": "control", "action": "erase", "scope": "ori", "target": "a", "reason": "r"}, "action"),
        ({"kind": "control", "action": "kill", "scope": "tier", "target": "gold", "reason": "r"}, "target"),
        (
            {
                "kind": "control",
                "action": "kill",
                "scope": "world",
                "target": "w",
                "world_id": "w",
                "reason": "r",
            },
            "world_id",
        ),
        (
            {
                "kind": "control",
                "action": "pause",
                "scope": "ori",
                "target": "a",
                "expires_minutes": "-1",
                "reason": "r",
            },
            "expires_minutes",
        ),
        ({"kind": "cap", "world_id": "w", "tokens_per_hour": "0", "reason": "r"}, "tokens_per_hour"),
        ({"kind": "budget", "tier": "clotho", "reason": "r"}, "max_model_calls"),
        ({"kind": "budget", "tier": "gold", "max_tokens": "5", "reason": "r"}, "tier"),
        ({"kind": "launch", "reason": "r"}, "kind"),
    ],
)
def test_a_bad_field_is_named(form: dict[str, str], field: str) -> None:
    with pytest.raises(OrderInvalid) as refused:
        parse_order(form)
    assert refused.value.field == field
