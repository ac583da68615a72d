"""Line charts as plain SVG text: the curves of a run, with no plotting library and no network.

A `Series` is one line (points, an optional shaded interval band, dashed
for a reference level such as a baseline); `line_chart` draws series over
steps as one self-contained `<svg>` element with axes, ticks, a legend and a
`<title>` per point (hover shows the value). The HTML report inlines these
charts; `write_reward_plot` writes the reward curve of a run to
`run_dir/reward.svg`, which any browser opens (`reward_png.py` draws the same
curves as a PNG with matplotlib, for image viewers and slides).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path

from .metrics import is_plotted_number

REWARD_PLOT_FILE = "reward.svg"
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MARGIN = {"left": 52, "right": 12, "top": 28, "bottom": 34}
MOST_MARKED_POINTS = 40
"""Series with at most this many points get a dot per point (a one-step run would otherwise show nothing)."""


@dataclass
class Series:
    """One line of a chart."""

    label: str
    """Legend text."""
    points: list[tuple[float, float]]
    """(step, value) pairs in step order."""
    band: list[tuple[float, float, float]] = field(default_factory=list)
    """(step, low, high): an interval drawn as a shaded area (or a bar at a lone step)."""
    dashed: bool = False
    """Drawn dashed: a reference level (a baseline), not a curve of this run."""


def _nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About ``count`` round numbers spanning [low, high]."""
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(multiple * magnitude for multiple in (1, 2, 2.5, 5, 10) if multiple * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + index * step for index in range(int((high - first) / step + 1e-9) + 1)]


def _tick_label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.4g}"


def _padded(low: float, high: float) -> tuple[float, float]:
    if high > low:
        pad = (high - low) * 0.05
        return low - pad, high + pad
    pad = abs(low) * 0.1 or 1.0
    return low - pad, high + pad


def line_chart(
    title: str,
    series: list[Series],
    *,
    width: int = 360,
    height: int = 210,
    x_label: str = "step",
    metric: str | None = None,
) -> str:
    """One chart of ``series`` over steps, as an ``<svg>`` element (class ``chart``, ``data-metric`` = ``metric``)."""
    xs = [x for one in series for x, _ in one.points] + [x for one in series for x, *_ in one.band]
    ys = [y for one in series for _, y in one.points] + [y for one in series for _, *ends in one.band for y in ends]
    metric_attribute = f' data-metric="{html.escape(metric)}"' if metric is not None else ""
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart"{metric_attribute} width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
    )
    parts = [
        head,
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="12" '
        f'font-weight="bold">{html.escape(title)}</text>',
    ]
    if not xs:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#888">no values</text></svg>')
        return "".join(parts)
    x_low, x_high = (min(xs), max(xs)) if max(xs) > min(xs) else (min(xs) - 1, max(xs) + 1)
    y_low, y_high = _padded(min(ys), max(ys))
    left, right, top, bottom = MARGIN["left"], width - MARGIN["right"], MARGIN["top"], height - MARGIN["bottom"]

    def at_x(x: float) -> float:
        return left + (x - x_low) / (x_high - x_low) * (right - left)

    def at_y(y: float) -> float:
        return bottom - (y - y_low) / (y_high - y_low) * (bottom - top)

    parts.append(
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fff" stroke="#ccc"/>'
    )
    for tick in _nice_ticks(y_low, y_high):
        parts.append(f'<line x1="{left}" x2="{right}" y1="{at_y(tick):.1f}" y2="{at_y(tick):.1f}" stroke="#eee"/>')
        parts.append(
            f'<text x="{left - 4}" y="{at_y(tick) + 4:.1f}" text-anchor="end" fill="#555">{_tick_label(tick)}</text>'
        )
    for tick in _nice_ticks(x_low, x_high):
        if tick == int(tick):
            parts.append(
                f'<text x="{at_x(tick):.1f}" y="{bottom + 14}" text-anchor="middle" fill="#555">{int(tick)}</text>'
            )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{height - 4}" text-anchor="middle" '
        f'fill="#555">{html.escape(x_label)}</text>'
    )
    for index, one in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        parts.extend(_series_marks(one, colour, at_x, at_y))
        if len(series) > 1:
            legend_y = top + 12 + 13 * index
            parts.append(
                f'<text x="{right - 4}" y="{legend_y}" text-anchor="end" '
                f'fill="{colour}">{html.escape(one.label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _series_marks(one: Series, colour: str, at_x, at_y) -> list[str]:
    marks = []
    if len(one.band) > 1:
        outline = [(at_x(x), at_y(high)) for x, _, high in one.band] + [
            (at_x(x), at_y(low)) for x, low, _ in reversed(one.band)
        ]
        marks.append(
            f'<polygon class="band" points="{_coordinates(outline)}" fill="{colour}" fill-opacity="0.15" '
            'stroke="none"/>'
        )
    elif one.band:
        x, low, high = one.band[0]
        marks.append(
            f'<line class="band" x1="{at_x(x):.1f}" x2="{at_x(x):.1f}" y1="{at_y(low):.1f}" '
            f'y2="{at_y(high):.1f}" stroke="{colour}" stroke-opacity="0.5" stroke-width="5"/>'
        )
    dash = ' stroke-dasharray="5,4"' if one.dashed else ""
    if len(one.points) > 1:
        line = _coordinates([(at_x(x), at_y(y)) for x, y in one.points])
        marks.append(f'<polyline class="line" points="{line}" fill="none" stroke="{colour}" stroke-width="1.6"{dash}/>')
    if len(one.points) <= MOST_MARKED_POINTS:
        for x, y in one.points:
            marks.append(
                f'<circle class="point" cx="{at_x(x):.1f}" cy="{at_y(y):.1f}" r="2.6" '
                f'fill="{colour}"><title>{html.escape(one.label)} at step {x:g}: {y:.4g}</title></circle>'
            )
    return marks


def _coordinates(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def metric_series(records: list[dict], key: str, label: str | None = None, *, dashed: bool = False) -> Series:
    """The finite values of ``key`` over the records' steps, with its ``key/ci_low``..``key/ci_high`` band when
    logged."""
    points, band = [], []
    for record in records:
        value = record.get(key)
        if is_plotted_number(value) and math.isfinite(value):
            points.append((float(record["step"]), float(value)))
            low, high = record.get(f"{key}/ci_low"), record.get(f"{key}/ci_high")
            if isinstance(low, (int, float)) and isinstance(high, (int, float)):
                band.append((float(record["step"]), float(low), float(high)))
    return Series(label or key, points, band, dashed)


def reward_series(records: list[dict]) -> list[Series]:
    """Mean training reward per step (± one standard deviation), and the held-out evaluations with their intervals."""
    training = metric_series(records, "reward/mean", "training reward")
    spread = {step: value for step, value in metric_series(records, "reward/std").points}
    training.band = [
        (step, mean - spread[step], mean + spread[step]) for step, mean in training.points if step in spread
    ]
    held_out = metric_series(records, "eval/reward/mean", "held-out reward (95 % interval)")
    return [training, held_out] if held_out.points else [training]


def reward_chart(records: list[dict], *, width: int = 640, height: int = 360) -> str:
    """The reward curves of `reward_series` as one SVG chart."""
    return line_chart("reward", reward_series(records), width=width, height=height, metric="reward/mean")


def write_reward_plot(run_dir: str | Path, records: list[dict]) -> Path:
    """Write the reward chart of ``records`` to ``run_dir/reward.svg``; returns its path."""
    path = Path(run_dir) / REWARD_PLOT_FILE
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + reward_chart(records) + "\n", encoding="utf-8")
    return path
