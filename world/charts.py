"""Inline SVG charts for the run report: stacked areas, lines over time, bars. No scripts, no fetches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH = 760
HEIGHT = 260
PAD_LEFT = 64
PAD_RIGHT = 16
PAD_TOP = 18
PAD_BOTTOM = 52
LEGEND_STEP = 190
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
    "tokens charged (ledger)": "#2b8a3e",
    "world cap per window": "#c92a2a",
    "cap per hour × elapsed hours": "#f08c00",
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


def _frame(
    title: str,
    y_ticks: Sequence[tuple[float, str]],
    labels: tuple[str, str],
    body: str,
    legend: Sequence[tuple[str, str]],
) -> str:
    """The chart's box: y gridlines at `y_ticks` (fraction of the plot height, label), the x axis's title
    under the plot on the right and the y axis's title turned up on the left (`labels`), and the legend
    on its own row at the bottom, so no two labels share a line."""
    x_label, y_label = labels
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    ticks = "".join(
        f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{PAD_TOP + plot_h * (1 - f):.1f}" '
        f'y2="{PAD_TOP + plot_h * (1 - f):.1f}" stroke="#e9ecef"/>'
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + plot_h * (1 - f) + 4:.1f}" text-anchor="end" '
        f'font-size="11" fill="#495057">{escape(label)}</text>'
        for f, label in y_ticks
    )
    keys = "".join(
        f'<rect x="{PAD_LEFT + LEGEND_STEP * i}" y="{HEIGHT - 14}" width="10" height="10" fill="{colour}"/>'
        f'<text x="{PAD_LEFT + LEGEND_STEP * i + 14}" y="{HEIGHT - 5}" font-size="11">{escape(name)}</text>'
        for i, (name, colour) in enumerate(legend)
    )
    y_title = (
        f'<text transform="translate(12 {PAD_TOP + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
        f'font-size="11" fill="#495057">{escape(y_label)}</text>'
        if y_label
        else ""
    )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        f"{ticks}{body}{y_title}"
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - PAD_BOTTOM + 30}" text-anchor="end" font-size="11" '
        f'fill="#495057">{escape(x_label)}</text>{keys}</svg></figure>'
    )


def _wrap(label: str, width: float) -> list[str]:
    """A group label on one line if it fits its slot (about 6.5 px a character at 11 px), else on two,
    broken at the space nearest its middle."""
    if len(label) * 6.5 <= width * 0.95 or " " not in label:
        return [label]
    spaces = [i for i, ch in enumerate(label) if ch == " "]
    cut = min(spaces, key=lambda i: abs(i - len(label) / 2))
    return [label[:cut], label[cut + 1 :]]


def _linear_ticks(y_max: float) -> list[tuple[float, str]]:
    return [(f, _fmt(y_max * f)) for f in (0.0, 0.25, 0.5, 0.75, 1.0)]


def stacked_area(
    title: str, xs: Sequence[int], layers: Sequence[tuple[str, Sequence[float]]], x_label: str
) -> str:
    """Layers stacked bottom-up (e.g. Ori per tier per tick)."""
    if not xs:
        return _frame(title, _linear_ticks(1), (x_label, ""), "", [])
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
    legend = [(n, COLOURS.get(n, "#adb5bd")) for n, _ in layers]
    return _frame(title, _linear_ticks(y_max), (x_label, "Ori"), body, legend)


def lines(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float], bool]],
    labels: tuple[str, str],
) -> str:
    """Lines over a numeric x (e.g. real seconds), each (name, xs, ys, dashed), with the x axis marked."""
    drawn = [(name, xs, ys, dashed) for name, xs, ys, dashed in series if xs]
    if not drawn:
        return _frame(title, _linear_ticks(1), labels, "", [])
    x0 = min(min(xs) for _, xs, _, _ in drawn)
    x1 = max(*(max(xs) for _, xs, _, _ in drawn), x0 + 1e-9)
    y_max = max([1.0, *(max(ys) * 1.1 for _, _, ys, _ in drawn)])
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(v: float) -> float:
        return PAD_LEFT + plot_w * (v - x0) / (x1 - x0)

    body = "".join(
        f'<text x="{x(x0 + (x1 - x0) * f):.1f}" y="{HEIGHT - PAD_BOTTOM + 14}" text-anchor="middle" '
        f'font-size="11" fill="#495057">{_fmt(x0 + (x1 - x0) * f)}</text>'
        for f in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    for name, xs, ys, dashed in drawn:
        points = " ".join(
            f"{x(a):.1f},{PAD_TOP + plot_h * (1 - b / y_max):.1f}" for a, b in zip(xs, ys, strict=True)
        )
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        colour = COLOURS.get(name, "#2b8a3e")
        body += (
            f'<polyline class="mark" points="{points}" fill="none" stroke="{colour}" '
            f'stroke-width="2.5"{dash}>'
            f"<title>{escape(name)}: {_fmt(ys[-1])}</title></polyline>"
        )
    legend = [(name, COLOURS.get(name, "#2b8a3e")) for name, _, _, _ in drawn]
    return _frame(title, _linear_ticks(y_max), labels, body, legend)


def grouped_bars(
    title: str,
    groups: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    y_label: str,
    *,
    log: bool = False,
) -> str:
    """One cluster per group (e.g. per cause), one bar per series (e.g. per tier), labelled with values;
    on a log scale (decades from 1) when `log`, so a bar a thousandth of another still shows."""
    series_names = sorted({name for _, bars in groups for name, _ in bars})
    y_max = max([v for _, bars in groups for _, v in bars] + [1.0])
    decades = max(math.ceil(math.log10(y_max)), 1)

    def height(v: float) -> float:
        if not log:
            return v / y_max
        return math.log10(v) / decades if v >= 1 else 0.0

    y_ticks = [(d / decades, _fmt(10.0**d)) for d in range(decades + 1)] if log else _linear_ticks(y_max)
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    slot = plot_w / max(len(groups), 1)
    bar_w = slot * 0.8 / max(len(series_names), 1)
    body = ""
    for g, (group, bars) in enumerate(groups):
        values = dict(bars)
        for s, name in enumerate(series_names):
            v = values.get(name, 0.0)
            h = plot_h * height(v)
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
        cx = PAD_LEFT + g * slot + slot / 2
        body += "".join(
            f'<text x="{cx:.1f}" y="{HEIGHT - PAD_BOTTOM + 14 + 13 * k}" text-anchor="middle" '
            f'font-size="11">{escape(part)}</text>'
            for k, part in enumerate(_wrap(group, slot))
        )
    legend = [(n, COLOURS.get(n, "#adb5bd")) for n in series_names]
    scale = " (log scale)" if log else ""
    return _frame(title, y_ticks, ("", y_label + scale), body, legend)


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
