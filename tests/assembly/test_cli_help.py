"""Every option and argument of every `egbe` command says what it is for, and no choice is blank."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator

from assembly.cli import build_parser
from tests.conftest import ROOT


def actions(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """(command path, action) for every option and positional argument, through every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from actions(command, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_has_help_text() -> None:
    missing = [
        f"{path} {action.option_strings or action.dest}"
        for path, action in actions(build_parser(), "egbe")
        if not (action.help or "").strip()
    ]
    assert missing == []


def test_no_option_offers_an_empty_choice() -> None:
    blank = [
        f"{path} {action.option_strings or action.dest}"
        for path, action in actions(build_parser(), "egbe")
        if action.choices is not None and any(not str(choice) for choice in action.choices)
    ]
    assert blank == []


def test_the_audit_export_help_lists_the_tiers_alone() -> None:
    shown = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "egbe"), "audit", "export", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--tier {clotho,lachesis,atropos}" in shown
    assert "only this tier's calls" in shown
