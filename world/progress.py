"""The live progress line: tick, tiers, calls issued, and the tokens the gateway's ledger has charged
against the world cap ("…" until the ledger first answers: never a made-up zero, never an estimate)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO

BAR_WIDTH = 24
# A progress line is redrawn at most this often; the clock here only paces the display.
REDRAW_SECONDS = 0.2


def _short(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _charge(p: Progress) -> str:
    if p.charged is None:
        return "…"
    return _short(p.charged) + (f" of {_short(p.cap)} cap" if p.cap else "")


@dataclass(frozen=True)
class Progress:
    tick: int
    tiers: tuple[int, int, int]
    calls: int
    charged: int | None  # tokens the ledger has charged this run; None until it first answers
    cap: int | None


class ProgressBar:
    """Redraws one line on a terminal; writes a plain line every tenth of the run elsewhere."""

    def __init__(self, total_ticks: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(total_ticks, 1)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._last_draw = 0.0
        self._last_tenth = -1

    def line(self, p: Progress) -> str:
        done = min(int(BAR_WIDTH * p.tick / self.total), BAR_WIDTH)
        bar = "#" * done + "-" * (BAR_WIDTH - done)
        clotho, lachesis, atropos = p.tiers
        return (
            f"tick {p.tick:>6}/{self.total} [{bar}] clotho {clotho} lachesis {lachesis} atropos {atropos}"
            f" | calls issued {_short(p.calls)} | tokens charged {_charge(p)}"
        )

    def update(self, p: Progress) -> None:
        if not self.enabled:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < REDRAW_SECONDS and p.tick < self.total:
                return
            self._last_draw = now
            self.stream.write("\r" + self.line(p))
        else:
            tenth = 10 * p.tick // self.total
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.stream.write(self.line(p) + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
