"""Console feedback while a command works: progress bars on a terminal, plain periodic lines elsewhere.

`ConsoleProgress` is what one command shows: on a terminal, one rich
display holding a bar per phase in flight; in CI logs and pipes plain lines
instead, so logs stay readable; with ``enabled=False`` (`logging.console:
false`, `sparring --quiet`) nothing. Its
`episodes(label, total)` gives an `EpisodeProgress`: the episodes of one
phase (a training step's rollouts, one evaluation) counted as they finish,
with the tokens sampled, tokens per second and the running mean reward (and
the first workflow metrics); off a terminal it prints a line at most every
`PLAIN_LINE_INTERVAL_S` seconds (and, for evaluations, one when done).
`TrainingProgress` adds the run's own bar: step i/N, elapsed time, ETA and
the latest `reward/mean` and `time/step`, or ``step 3/20 reward=0.412
time=12.3s`` per step off a terminal. `print_table` renders a small
comparison table (the held-out evaluation of a run: models and baselines
side by side, with a footnote) with rich, which degrades to plain text off a
terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column, Table

from sparring.rollout.types import Episode

PLAIN_LINE_INTERVAL_S = 15.0
"""Off a terminal, the least time between two progress lines of one phase."""
SHOWN_WORKFLOW_METRICS = 2
"""How many of the workflow's own metrics a running summary shows beside the reward."""


def _summary(metrics: dict[str, float]) -> str:
    """The few numbers worth watching per step: mean reward and step time."""
    parts = []
    if metrics.get("reward/mean") is not None:
        parts.append(f"reward={metrics['reward/mean']:.3f}")
    if metrics.get("time/step") is not None:
        parts.append(f"time={metrics['time/step']:.1f}s")
    return " ".join(parts)


def sampled_tokens(episode: Episode) -> int:
    """Tokens the episode's model calls sampled, trainable and frozen alike."""
    return sum(call.get("completion_tokens", 0) for calls in episode.transcripts.values() for call in calls)


class ConsoleProgress:
    """What one command shows while it runs; ``episodes(label, total)`` for each phase of episodes."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        # Asks stdout itself, not rich: FORCE_COLOR (set by some CI) must not bring a live bar into a log file.
        if enabled and sys.stdout.isatty():
            # On a narrow terminal only the summary is cut short; the counts and times stay whole.
            whole = Column(no_wrap=True)
            self._progress = Progress(
                TextColumn("[bold]{task.description}", table_column=whole),
                MofNCompleteColumn(table_column=whole),
                BarColumn(bar_width=24),
                TimeElapsedColumn(table_column=whole),
                TextColumn("eta", table_column=whole),
                TimeRemainingColumn(table_column=whole),
                TextColumn("{task.fields[summary]}", table_column=Column(no_wrap=True, overflow="ellipsis")),
            )

    def episodes(self, label: str, total: int, *, final_line: bool = False) -> EpisodeProgress:
        """Count the ``total`` episodes of one phase as they finish; ``final_line`` prints a plain summary when done."""
        return EpisodeProgress(label, total, self._progress, plain=self.enabled and self._progress is None, final_line=final_line)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> ConsoleProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class EpisodeProgress:
    """The finished episodes of one phase: count, tokens sampled, tokens/s, running means. ``add`` each episode."""

    def __init__(self, label: str, total: int, progress: Progress | None, *, plain: bool, final_line: bool) -> None:
        self.label, self.total = label, total
        self.done = self.tokens = self.errors = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._started = self._last_line = time.perf_counter()
        self._progress, self._plain, self._final_line = progress, plain, final_line
        self._task: TaskID | None = None
        if progress is not None and total > 0:
            self._task = progress.add_task(f"  {label}", total=total, summary="")

    def add(self, episode: Episode) -> None:
        """Count one finished episode."""
        self.done += 1
        self.tokens += sampled_tokens(episode)
        self.errors += episode.failed
        values = {"reward": sum(episode.rewards.values()) / len(episode.rewards)} if episode.rewards else {}
        values.update({key: value for key, value in episode.metrics.items() if value is not None})
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + float(value)
            self.counts[key] = self.counts.get(key, 0) + 1
        now = time.perf_counter()
        if self._task is not None:
            self._progress.update(self._task, completed=self.done, summary=self.summary())
            if self.done >= self.total:
                self._progress.remove_task(self._task)
                self._task = None
        elif self._plain and (now - self._last_line >= PLAIN_LINE_INTERVAL_S or (self._final_line and self.done == self.total)):
            self._last_line = now
            print(f"  {self.label}: {self.done}/{self.total} episodes, {self.summary()}", flush=True)

    def summary(self) -> str:
        """``1234 tokens (56 tok/s) reward=0.412 success=0.500 errors=1``: what has finished so far."""
        rate = self.tokens / max(time.perf_counter() - self._started, 1e-9)
        means = [f"{key}={self.sums[key] / self.counts[key]:.3f}" for key in list(self.sums)[: 1 + SHOWN_WORKFLOW_METRICS]]
        return " ".join([f"{self.tokens} tokens ({rate:.0f} tok/s)", *means, *([f"errors={self.errors}"] if self.errors else [])])


class TrainingProgress(ConsoleProgress):
    """Progress of a training run; ``update(step, metrics)`` after each step (``step`` = steps completed)."""

    def __init__(self, total_steps: int, enabled: bool = True, *, start_step: int = 0) -> None:
        """``start_step`` is where a resumed run picks up, so the ETA counts only this run's speed."""
        super().__init__(enabled)
        self.total_steps = total_steps
        if self._progress is not None:
            self._task = self._progress.add_task("step", total=total_steps, completed=start_step, summary="")

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Show that ``step`` steps are done, with that step's metrics."""
        summary = _summary(metrics)
        if self._progress is None:
            if self.enabled:
                print(f"step {step}/{self.total_steps}" + (f" {summary}" if summary else ""), flush=True)
        else:
            self._progress.update(self._task, completed=step, summary=summary)

    def __enter__(self) -> TrainingProgress:
        super().__enter__()
        return self


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
