"""Charts as inline SVG, drawn here so the page fetches no chart library: `bars` (a value per
period, a lighter part stacked on it, a cap and a soft line across) and `lines` (series over
bins, broken where a bin has no value).

Every element is built by `Markup.format`, which passes each argument through
`markupsafe.escape`: numbers and escaped text only, since labels come from Redis and config
files. The page's Content-Security-Policy allows no inline style, so everything is drawn with
SVG attributes and styled by class (style.css, `.chart`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup

W, H = 960, 220  # the viewBox; the chart scales to the page's width
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 12, 22  # room for the y labels, the x labels
PLOT_W, PLOT_H = W - LEFT - RIGHT, H - TOP - BOTTOM
TICKS = 8  # x labels shown at most; every bar and point says its own in its hover text

Fmt = Callable[[float], str]


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def bars(
    values: Sequence[float | None],
    labels: Sequence[str],
    cap: float | None = None,
    soft: float | None = None,
    *,
    extra: Sequence[float] = (),
    titles: Sequence[str] = (),
    fmt: Fmt = number,
    name: str = "",
) -> Markup:
    """A bar per value (None: no bar), `extra` stacked on it lighter; `titles` the hover text
    of each bar (else its label and value)."""
    if not any(v is not None for v in values):
        return empty(name)
    more = [*extra, *[0.0] * (len(values) - len(extra))]
    top = _top([*((v or 0) + m for v, m in zip(values, more, strict=True)), cap or 0, soft or 0])
    parts = [_open(name), *_frame(top, fmt)]
    for i, value in enumerate(values):
        said = titles[i] if i < len(titles) else _said(labels[i], value, fmt)
        parts.append(_bar(i, len(values), value, more[i], top, said))
    for kind, at in (("cap", cap), ("soft", soft)):
        if at is not None:
            parts.append(_across(kind, at, top, fmt))
    parts += [*_ticks(labels), Markup("</svg>")]
    return Markup("").join(parts)


def lines(
    series: Mapping[str, Sequence[float | None]],
    labels: Sequence[str],
    *,
    fmt: Fmt = number,
    name: str = "",
) -> Markup:
    """A line per series (its name is its class: `p50` ...), a dot with hover text per value;
    a None leaves a gap."""
    known = [v for values in series.values() for v in values if v is not None]
    if not known:
        return empty(name)
    top = _top(known)
    parts = [_open(name), *_frame(top, fmt)]
    for n, (key, values) in enumerate(series.items()):
        parts += [_path(key, values, top), *_dots(key, values, labels, top, fmt)]
        parts.append(_legend(n, key))
    parts += [*_ticks(labels), Markup("</svg>")]
    return Markup("").join(parts)


def empty(name: str = "") -> Markup:
    said = Markup('<text class="none" x="{}" y="{}" text-anchor="middle">no data</text>')
    return _open(name) + said.format(W // 2, H // 2) + Markup("</svg>")


def y_of(value: float, top: float) -> float:
    """The y of `value` on a chart whose highest line is `top`."""
    return TOP + PLOT_H - value / top * PLOT_H


def _top(values: Sequence[float]) -> float:
    """The scale's top: the highest value, or 1 when there is nothing above 0."""
    highest = max((v for v in values if math.isfinite(v)), default=0.0)
    return highest if highest > 0 else 1.0


def _open(name: str) -> Markup:
    svg = '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">'
    return Markup(svg).format(W, H, name or "chart")


def _frame(top: float, fmt: Fmt) -> list[Markup]:
    """The baseline and the scale: 0 at the bottom, `top` at the top."""
    label = Markup('<text x="{}" y="{:.1f}" text-anchor="end">{}</text>')
    base = Markup('<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>')
    return [
        base.format(LEFT, W - RIGHT, TOP + PLOT_H, TOP + PLOT_H),
        label.format(LEFT - 4, TOP + PLOT_H, fmt(0)),
        label.format(LEFT - 4, TOP + 8, fmt(top)),
    ]


def _said(label: str, value: float | None, fmt: Fmt) -> str:
    return f"{label}: {'no value' if value is None else fmt(value)}"


def _bar(i: int, n: int, value: float | None, more: float, top: float, said: str) -> Markup:
    slot = PLOT_W / n
    x, width = LEFT + i * slot + slot * 0.1, slot * 0.8
    rect = Markup('<rect class="{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>')
    used = value or 0
    parts = [Markup("<g><title>{}</title>").format(said)]
    if value is not None:
        parts.append(rect.format("col", x, y_of(used, top), width, used / top * PLOT_H))
    if more > 0:
        y = y_of(used + more, top)
        parts.append(rect.format("col extra", x, y, width, more / top * PLOT_H))
    parts.append(Markup("</g>"))
    return Markup("").join(parts)


def _across(kind: str, at: float, top: float, fmt: Fmt) -> Markup:
    """A line across the chart at `at` (the cap, the soft band's start), its value beside."""
    y = y_of(at, top)
    line = Markup('<line class="{}" x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}"/>')
    text = Markup('<text x="{}" y="{:.1f}" text-anchor="end">{} {}</text>')
    said = text.format(W - RIGHT, y - 3, kind, fmt(at))
    return line.format(kind, LEFT, W - RIGHT, y, y) + said


def _x_of(i: int, n: int) -> float:
    return LEFT + (i + 0.5) * PLOT_W / n


def _path(key: str, values: Sequence[float | None], top: float) -> Markup:
    steps, drawing = [], False
    for i, v in enumerate(values):
        if v is None:
            drawing = False
            continue
        steps.append(f"{'L' if drawing else 'M'}{_x_of(i, len(values)):.1f} {y_of(v, top):.1f}")
        drawing = True
    return Markup('<path class="line {}" d="{}"/>').format(key, " ".join(steps))


def _dots(
    key: str, values: Sequence[float | None], labels: Sequence[str], top: float, fmt: Fmt
) -> list[Markup]:
    dot = Markup(
        '<circle class="dot {}" cx="{:.1f}" cy="{:.1f}" r="2"><title>{}: {} {}</title></circle>'
    )
    n = len(values)
    return [
        dot.format(key, _x_of(i, n), y_of(v, top), labels[i], key, fmt(v))
        for i, v in enumerate(values)
        if v is not None
    ]


def _legend(n: int, key: str) -> Markup:
    x = LEFT + 8 + n * 56
    mark = Markup('<line class="line {}" x1="{}" x2="{}" y1="{}" y2="{}"/>')
    text = Markup('<text x="{}" y="{}">{}</text>')
    return mark.format(key, x, x + 14, TOP, TOP) + text.format(x + 18, TOP + 3, key)


def _ticks(labels: Sequence[str]) -> list[Markup]:
    """Some of the labels under the chart: at most `TICKS`, evenly spaced."""
    n = len(labels)
    every = max(math.ceil(n / TICKS), 1)
    text = Markup('<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>')
    return [text.format(_x_of(i, n), H - 6, labels[i]) for i in range(0, n, every)]
