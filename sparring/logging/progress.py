"""Console feedback while a command works: progress bars on a terminal, plain periodic lines elsewhere.

`ConsoleProgress` is what one command shows: on a terminal, one rich
display holding a bar per phase in flight; in CI logs and pipes plain lines
instead, so logs stay readable; with ``enabled=False`` (`logging.console:
false`, `sparring --quiet`) nothing. Its
`episodes(label, total)` gives an `EpisodeProgress`: the episodes of one
phase (a training step's rollouts, one evaluation) counted as they finish,
with the tokens sampled, tokens per second and the running mean reward (and
the first workflow metrics); off a terminal it prints a line at most every
`PLAIN_LINE_INTERVAL_S` seconds (and, for evaluations, one when done), and a
heartbeat prints one at least that often, also between phases (a long
update). `TrainingProgress` adds the run's own bar: step i/N, ETA at this
run's pace and the latest `reward/mean` and `time/step` (readable at 80
columns), or ``step 3/20 reward=0.412 time=12.3s`` per step off a terminal. `print_table` renders a small
comparison table (the held-out evaluation of a run: models and baselines
side by side, with a footnote) with rich, which degrades to plain text off a
terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Column, Table

from sparring.rollout.types import Episode

PLAIN_LINE_INTERVAL_S = 15.0
"""Off a terminal, the least time between two progress lines of one phase."""
HEARTBEAT_POLL_S = 1.0
"""How often, off a terminal, the heartbeat checks whether a line is due."""
WIDE_CONSOLE = 110
"""Terminals at least this wide get the wide bar; narrower ones (80 columns) the narrow one, so the summary fits."""
WIDE_BAR, NARROW_BAR = 24, 8
"""Bar widths in characters."""
FIXED_COLUMNS = 46
"""Characters the label (``  step 12 rollouts``), the counts, ``eta 0:01:02`` and the gaps take beside the bar;
the summary gets what is left of the terminal's width, so those stay whole."""
MIN_SUMMARY = 24
"""The summary's least width: ``reward=0.412 time=12.3s``."""
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


def clock(seconds: float) -> str:
    """``1:02:03`` (hours:minutes:seconds) for a duration."""
    whole = int(max(seconds, 0.0))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def eta(started: float, done: int, remaining: int) -> str:
    """The time left at the pace so far (``done`` units since ``started``); ``-:--:--`` before the first is done."""
    if done <= 0:
        return "-:--:--"
    return clock((time.perf_counter() - started) / done * remaining)


class ConsoleProgress:
    """What one command shows while it runs; ``episodes(label, total)`` for each phase of episodes.

    Off a terminal a heartbeat thread makes sure a line appears at least every `PLAIN_LINE_INTERVAL_S` seconds:
    the counts of the phases in flight, or, between phases (a long update), what the command is doing.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.activity = "working"
        """What the command does between phases, for the heartbeat line."""
        self._progress: Progress | None = None
        self._phases: list[EpisodeProgress] = []
        self._last_line = time.perf_counter()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        # Asks stdout itself, not rich: FORCE_COLOR (set by some CI) must not bring a live bar into a log file.
        if enabled and sys.stdout.isatty():
            # Counts, step and ETA stay whole; at 80 columns the bar narrows so the reward fits, and only a
            # summary longer than what is left is cut short.
            width = Console().width
            bar = WIDE_BAR if width >= WIDE_CONSOLE else NARROW_BAR
            summary = Column(no_wrap=True, overflow="ellipsis", max_width=max(width - FIXED_COLUMNS - bar, MIN_SUMMARY))
            self._progress = Progress(
                TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
                MofNCompleteColumn(table_column=Column(no_wrap=True)),
                BarColumn(bar_width=bar),
                TextColumn("eta {task.fields[eta]}", table_column=Column(no_wrap=True)),
                TextColumn("{task.fields[summary]}", table_column=summary),
            )

    @property
    def plain(self) -> bool:
        """Plain lines (no live display): enabled, off a terminal."""
        return self.enabled and self._progress is None

    def line(self, text: str) -> None:
        """Print one plain progress line."""
        self._last_line = time.perf_counter()
        print(text, flush=True)

    def episodes(self, label: str, total: int, *, final_line: bool = False) -> EpisodeProgress:
        """Count the ``total`` episodes of one phase as they finish; ``final_line`` prints a plain summary when done."""
        phase = EpisodeProgress(label, total, self, final_line=final_line)
        self._phases.append(phase)
        return phase

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_POLL_S):
            quiet_for = time.perf_counter() - self._last_line
            if quiet_for < PLAIN_LINE_INTERVAL_S:
                continue
            active = [phase for phase in list(self._phases) if phase.done < phase.total]
            for phase in active:
                self.line(phase.plain_line())
            if not active:
                self.line(f"{self.activity}: still working ({clock(quiet_for)} since the last line)")

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> ConsoleProgress:
        if self._progress is not None:
            self._progress.start()
        elif self.plain:
            self._heartbeat = threading.Thread(target=self._beat, name="sparring-progress-heartbeat", daemon=True)
            self._heartbeat.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class EpisodeProgress:
    """The finished episodes of one phase: count, tokens sampled, tokens/s, running means. ``add`` each episode."""

    def __init__(self, label: str, total: int, console: ConsoleProgress, *, final_line: bool) -> None:
        self.label, self.total = label, total
        self.done = self.tokens = self.errors = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._started = self._last_line = time.perf_counter()
        self._console, self._progress, self._plain, self._final_line = (
            console,
            console._progress,
            console.plain,
            final_line,
        )
        self._task: TaskID | None = None
        if self._progress is not None and total > 0:
            self._task = self._progress.add_task(
                f"  {label}", total=total, summary="", eta=eta(self._started, 0, total)
            )

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
        if self.done >= self.total and self in self._console._phases:
            self._console._phases.remove(self)  # the heartbeat reports phases in flight only
        if self._task is not None:
            self._progress.update(
                self._task,
                completed=self.done,
                summary=self.summary(),
                eta=eta(self._started, self.done, self.total - self.done),
            )
            if self.done >= self.total:
                self._progress.remove_task(self._task)
                self._task = None
        elif self._plain and (
            now - self._last_line >= PLAIN_LINE_INTERVAL_S or (self._final_line and self.done == self.total)
        ):
            self._last_line = now
            self._console.line(self.plain_line())

    def plain_line(self) -> str:
        """``  step 1 rollouts: 3/8 episodes, ...``: the phase's progress line off a terminal."""
        return f"  {self.label}: {self.done}/{self.total} episodes, {self.summary()}"

    def summary(self) -> str:
        """``1234 tokens (56 tok/s) reward=0.412 success=0.500 errors=1``: what has finished so far."""
        rate = self.tokens / max(time.perf_counter() - self._started, 1e-9)
        means = [
            f"{key}={self.sums[key] / self.counts[key]:.3f}" for key in list(self.sums)[: 1 + SHOWN_WORKFLOW_METRICS]
        ]
        return " ".join(
            [f"{self.tokens} tokens ({rate:.0f} tok/s)", *means, *([f"errors={self.errors}"] if self.errors else [])]
        )


class TrainingProgress(ConsoleProgress):
    """Progress of a training run; ``update(step, metrics)`` after each step (``step`` = steps completed)."""

    def __init__(self, total_steps: int, enabled: bool = True, *, start_step: int = 0) -> None:
        """``start_step`` is where a resumed run picks up, so the ETA counts only this run's speed."""
        super().__init__(enabled)
        self.total_steps, self.start_step = total_steps, start_step
        self.activity = f"step {start_step + 1}/{total_steps}"
        self._started = time.perf_counter()
        if self._progress is not None:
            self._task = self._progress.add_task(
                "step", total=total_steps, completed=start_step, summary="", eta=eta(self._started, 0, total_steps)
            )

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Show that ``step`` steps are done, with that step's metrics."""
        summary = _summary(metrics)
        self.activity = f"step {step + 1}/{self.total_steps}"
        if self._progress is None:
            if self.enabled:
                self.line(f"step {step}/{self.total_steps}" + (f" {summary}" if summary else ""))
        else:
            self._progress.update(
                self._task,
                completed=step,
                summary=summary,
                eta=eta(self._started, step - self.start_step, self.total_steps - step),
            )

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
