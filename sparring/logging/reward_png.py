"""`write_reward_png`: the reward curves of a run as `run_dir/reward.png`, drawn with matplotlib.

The SVG chart (`plots.py`) needs no plotting library and is what the HTML
report inlines; a PNG is what image viewers, chat tools and slides take, so
every run writes both from the same `reward_series`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: a run on a server or in CI must still write its plot

from matplotlib import pyplot  # noqa: E402

from .plots import PALETTE, reward_series  # noqa: E402

REWARD_PNG_FILE = "reward.png"


def write_reward_png(run_dir: str | Path, records: list[dict]) -> Path:
    """Write the reward curves of ``records`` to ``run_dir/reward.png``; returns its path."""
    figure, axes = pyplot.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        for colour, series in zip(PALETTE, reward_series(records), strict=False):
            steps = [step for step, _ in series.points]
            axes.plot(
                steps, [value for _, value in series.points], marker="o", markersize=3, color=colour, label=series.label
            )
            if series.band:
                band_steps, lows, highs = zip(*series.band, strict=True)
                axes.fill_between(band_steps, lows, highs, color=colour, alpha=0.2, linewidth=0)
        axes.set_xlabel("step")
        axes.set_ylabel("reward")
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
        figure.tight_layout()
        path = Path(run_dir) / REWARD_PNG_FILE
        figure.savefig(path)
    finally:
        pyplot.close(figure)
    return path
