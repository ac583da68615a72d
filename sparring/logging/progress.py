"""Console feedback while training: a progress bar on a terminal, one plain line per step elsewhere.

`TrainingProgress` shows step i/N, elapsed time, ETA and the latest
`reward/mean` and `time/step` as a rich progress bar when stdout is a
terminal; in CI logs and pipes (or with ``enabled=False``) it prints
``step 3/20 reward=0.412 time=12.3s`` per step instead, so logs stay
readable. `print_table` renders a small comparison table (the held-out
evaluation of a run: models and baselines side by side, with a footnote) with
rich, which degrades to plain text off a terminal.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


def _summary(metrics: dict[str, float]) -> str:
    """The few numbers worth watching per step: mean reward and step time."""
    parts = []
    if metrics.get("reward/mean") is not None:
        parts.append(f"reward={metrics['reward/mean']:.3f}")
    if metrics.get("time/step") is not None:
        parts.append(f"time={metrics['time/step']:.1f}s")
    return " ".join(parts)


class TrainingProgress:
    """Progress of a training run; ``update(step, metrics)`` after each step (``step`` = steps completed)."""

    def __init__(self, total_steps: int, enabled: bool = True, *, start_step: int = 0) -> None:
        """``start_step`` is where a resumed run picks up, so the ETA counts only this run's speed."""
        self.total_steps = total_steps
        self._progress = None
        # Asks stdout itself, not rich: FORCE_COLOR (set by some CI) must not bring a live bar into a log file.
        if enabled and sys.stdout.isatty():
            self._progress = Progress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[summary]}"),
            )
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, summary="")

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Show that ``step`` steps are done, with that step's metrics."""
        summary = _summary(metrics)
        if self._progress is None:
            print(f"step {step}/{self.total_steps}" + (f" {summary}" if summary else ""), flush=True)
        else:
            self._progress.update(self._task, completed=step, summary=summary)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> TrainingProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_table(title: str, rows: list[dict], columns: list[str], caption: str | None = None) -> None:
    """Print ``rows`` as a table of ``columns`` (missing cells as '-', floats to 3 decimals), ``caption`` below it.

    Cells never wrap: a table wider than the terminal runs past its edge instead of breaking numbers apart.
    """
    table = Table(title=title, caption=caption, caption_justify="left")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    console = Console()
    width = Console(width=10_000).measure(table).maximum  # the unwrapped width, whatever the terminal's
    if width > console.width:
        console = Console(width=width)
    console.print(table)
