"""Inline SVG charts for the run report: stacked areas, lines against a cap, bars. No scripts, no fetches."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 760
HEIGHT = 260
PAD_LEFT = 64
PAD_RIGHT = 16
PAD_TOP = 18
PAD_BOTTOM = 34
MAX_POINTS = 600
COLOURS = {
    "clotho": "#d9480f",
    "lachesis": "#1971c2",
    "atropos": "#5f3dc4",
    "issued": "#2b8a3e",
    "naive": "#868e96",
    "allowed": "#2b8a3e",
    "deferred": "#f08c00",
    "refused": "#c92a2a",
    "cap": "#c92a2a",
}


def _fmt(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}" if n != int(n) else str(int(n))


def _downsample(xs: Sequence[int], series: Sequence[Sequence[float]]) -> tuple[list[int], list[list[float]]]:
    """At most MAX_POINTS points, each the mean of its bucket, so long runs draw quickly."""
    n = len(xs)
    if n <= MAX_POINTS:
        return list(xs), [list(map(float, s)) for s in series]
    step = n / MAX_POINTS
    out_x, out = [], [[] for _ in series]  # type: list[int], list[list[float]]
    for b in range(MAX_POINTS):
        lo, hi = int(b * step), max(int((b + 1) * step), int(b * step) + 1)
        out_x.append(xs[lo])
        for k, s in enumerate(series):
            chunk = s[lo:hi]
            out[k].append(sum(chunk) / len(chunk))
    return out_x, out


def _frame(title: str, y_max: float, x_label: str, body: str, legend: Sequence[tuple[str, str]]) -> str:
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    ticks = "".join(
        f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{PAD_TOP + plot_h * (1 - f):.1f}" '
        f'y2="{PAD_TOP + plot_h * (1 - f):.1f}" stroke="#e9ecef"/>'
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + plot_h * (1 - f) + 4:.1f}" text-anchor="end" '
        f'font-size="11" fill="#495057">{_fmt(y_max * f)}</text>'
        for f in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    keys = "".join(
        f'<rect x="{PAD_LEFT + 130 * i}" y="{HEIGHT - 14}" width="10" height="10" fill="{colour}"/>'
        f'<text x="{PAD_LEFT + 130 * i + 14}" y="{HEIGHT - 5}" font-size="11">{escape(name)}</text>'
        for i, (name, colour) in enumerate(legend)
    )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        f"{ticks}{body}"
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 20}" text-anchor="end" font-size="11" fill="#495057">'
        f"{escape(x_label)}</text>{keys}</svg></figure>"
    )


def stacked_area(
    title: str, xs: Sequence[int], layers: Sequence[tuple[str, Sequence[float]]], x_label: str
) -> str:
    """Layers stacked bottom-up (e.g. Ori per tier per tick)."""
    if not xs:
        return _frame(title, 1, x_label, "", [])
    px, values = _downsample(xs, [layer for _, layer in layers])
    totals = [sum(v[i] for v in values) for i in range(len(px))]
    y_max = max(*totals, 1.0)
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    x0, x1 = px[0], max(px[-1], px[0] + 1)

    def x(v: int) -> float:
        return PAD_LEFT + plot_w * (v - x0) / (x1 - x0)

    def y(v: float) -> float:
        return PAD_TOP + plot_h * (1 - v / y_max)

    base = [0.0] * len(px)
    body = ""
    for (name, _), layer in zip(layers, values, strict=True):
        top = [b + v for b, v in zip(base, layer, strict=True)]
        upper = " ".join(f"{x(px[i]):.1f},{y(top[i]):.1f}" for i in range(len(px)))
        lower = " ".join(f"{x(px[i]):.1f},{y(base[i]):.1f}" for i in reversed(range(len(px))))
        colour = COLOURS.get(name, "#adb5bd")
        body += f'<polygon class="mark" points="{upper} {lower}" fill="{colour}" opacity="0.85"/>'
        base = top
    return _frame(title, y_max, x_label, body, [(n, COLOURS.get(n, "#adb5bd")) for n, _ in layers])


def line_against_cap(
    title: str, xs: Sequence[int], series: Sequence[tuple[str, Sequence[float]]], cap: float, x_label: str
) -> str:
    """Cumulative lines with a horizontal cap line (spend against the world cap)."""
    if not xs:
        return _frame(title, 1, x_label, "", [])
    px, values = _downsample(xs, [s for _, s in series])
    y_max = max([cap * 1.1, 1.0, *(max(v) * 1.05 for v in values)])
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    x0, x1 = px[0], max(px[-1], px[0] + 1)
    body = ""
    for (name, _), v in zip(series, values, strict=True):
        points = " ".join(
            f"{PAD_LEFT + plot_w * (px[i] - x0) / (x1 - x0):.1f},{PAD_TOP + plot_h * (1 - v[i] / y_max):.1f}"
            for i in range(len(px))
        )
        colour = COLOURS.get(name, "#2b8a3e")
        body += f'<polyline class="mark" points="{points}" fill="none" stroke="{colour}" stroke-width="2.5"/>'
    legend = [(n, COLOURS.get(n, "#2b8a3e")) for n, _ in series]
    if cap > 0:
        cy = PAD_TOP + plot_h * (1 - cap / y_max)
        body += (
            f'<line class="mark" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{cy:.1f}" y2="{cy:.1f}" '
            f'stroke="{COLOURS["cap"]}" stroke-dasharray="6 4" stroke-width="2"/>'
            f'<text x="{WIDTH - PAD_RIGHT - 4}" y="{cy - 5:.1f}" text-anchor="end" font-size="11" '
            f'fill="{COLOURS["cap"]}">world cap {_fmt(cap)} tokens</text>'
        )
        legend.append(("world cap", COLOURS["cap"]))
    return _frame(title, y_max, x_label, body, legend)


def grouped_bars(title: str, groups: Sequence[tuple[str, Sequence[tuple[str, float]]]], y_label: str) -> str:
    """One cluster per group (e.g. per cause), one bar per series (e.g. per tier), labelled with values."""
    series_names = sorted({name for _, bars in groups for name, _ in bars})
    y_max = max([v for _, bars in groups for _, v in bars] + [1.0])
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    slot = plot_w / max(len(groups), 1)
    bar_w = slot * 0.8 / max(len(series_names), 1)
    body = ""
    for g, (group, bars) in enumerate(groups):
        values = dict(bars)
        for s, name in enumerate(series_names):
            v = values.get(name, 0.0)
            h = plot_h * v / y_max
            bx = PAD_LEFT + g * slot + slot * 0.1 + s * bar_w
            body += (
                f'<rect class="mark" x="{bx:.1f}" y="{PAD_TOP + plot_h - h:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{max(h, 0.5):.1f}" fill="{COLOURS.get(name, "#adb5bd")}"><title>{escape(group)} '
                f"{escape(name)}: {_fmt(v)}</title></rect>"
            )
            if v:
                body += (
                    f'<text x="{bx + bar_w / 2:.1f}" y="{PAD_TOP + plot_h - h - 3:.1f}" text-anchor="middle" '
                    f'font-size="10">{_fmt(v)}</text>'
                )
        body += (
            f'<text x="{PAD_LEFT + g * slot + slot / 2:.1f}" y="{HEIGHT - PAD_BOTTOM + 14}" '
            f'text-anchor="middle" font-size="11">{escape(group)}</text>'
        )
    return _frame(title, y_max, y_label, body, [(n, COLOURS.get(n, "#adb5bd")) for n in series_names])


def timeline(title: str, end_tick: int, rows: Sequence[tuple[str, Sequence[tuple[int, str]]]]) -> str:
    """One lane per Ori, one dot per biography event at its tick, the event named on hover."""
    lane = 26
    height = PAD_TOP + lane * max(len(rows), 1) + PAD_BOTTOM
    plot_w = WIDTH - 160 - PAD_RIGHT
    span = max(end_tick, 1)
    body = ""
    for r, (name, events) in enumerate(rows):
        cy = PAD_TOP + lane * r + lane / 2
        body += (
            f'<text x="150" y="{cy + 4:.1f}" text-anchor="end" font-size="12">{escape(name)}</text>'
            f'<line x1="160" x2="{160 + plot_w}" y1="{cy:.1f}" y2="{cy:.1f}" stroke="#dee2e6"/>'
        )
        for tick, label in events:
            cx = 160 + plot_w * min(tick, span) / span
            body += (
                f'<circle class="mark" cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="#2b8a3e">'
                f"<title>{escape(label)}</title></circle>"
            )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">{body}'
        f'<text x="{WIDTH - PAD_RIGHT}" y="{height - 8}" text-anchor="end" font-size="11" fill="#495057">'
        f"tick (20 per game-second)</text></svg></figure>"
    )
