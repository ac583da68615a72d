"""Scalar metrics of a training run: one JSON line per step, plus TensorBoard and wandb.

`MetricsLogger` is the one sink the trainer writes to. `run_dir/metrics.jsonl`
is the record of truth (append-only, flushed per line, so a crash loses at
most the step in flight, and a resumed run first drops the steps it will
redo); TensorBoard and wandb are optional mirrors that switch themselves off
with one warning line (what is missing and how to install it) when their
package is missing. `read_metrics` reads the
file back (plots, tests, `sparring view`); `mean_metrics` averages
per-episode metrics into one step's scalars.

Metric keys are slash-namespaced (`reward/mean`, `agent/<name>/reward`,
`time/rollout`) and passed through unchanged to every sink.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
WANDB_RUN_ID_FILE = "wandb_run_id"


def _json_scalar(value: Any) -> Any:
    """A metric value as JSON can hold it: ints and strings as they are, floats finite or null."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    number = float(value)  # numpy and 0-d torch scalars too
    return number if math.isfinite(number) else None


def is_plotted_number(value: Any) -> bool:
    """Whether a metrics.jsonl value is a number to chart or send to TensorBoard (not a bool, a string or null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_lines(text: str, path: Path) -> list[dict]:
    """Parse JSON lines; a torn last line (a crash mid-write) is dropped, any other bad line raises."""
    lines = [line for line in text.splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                logger.warning("%s: ignoring a torn last line (%s)", path, error)
                break
            raise ValueError(f"{path}: line {number} is not valid JSON: {error}") from error
    return records


def read_metrics(path: str | Path) -> list[dict]:
    """Read a metrics.jsonl file (or the one in a run directory) as a list of step records."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    return _parse_lines(path.read_text(encoding="utf-8"), path)


def mean_metrics(dicts: list[dict[str, float]], prefix: str = "") -> dict[str, float]:
    """Mean of each key over the dicts that have it (None values skipped), keys prefixed with ``prefix``.

    ``prefix`` is prepended as is: ``mean_metrics(per_episode, "workflow/")`` gives ``workflow/<key>``.
    """
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for metrics in dicts:
        for key, value in metrics.items():
            if value is None:
                continue
            totals[key] = totals.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    return {prefix + key: totals[key] / counts[key] for key in totals}


def repair_torn_end(path: Path, step: int, saved: dict | None, checkpoint: Path) -> bool:
    """On resume from `checkpoint` (after `step` steps): a torn last line of metrics.jsonl (a crash or a full disk
    mid-write) is dropped, and when the records then lack the checkpoint's own step record (`saved`, the one the
    checkpoint kept) it is written back; one warning line says what was done. True when the file was torn."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] if path.exists() else []
    try:
        if lines:
            json.loads(lines[-1])
        return False
    except json.JSONDecodeError:
        records = _parse_lines("\n".join(lines[:-1]), path)
    restored = saved is not None and saved not in records
    _write_records(path, [*records, saved] if restored else records)
    if restored:
        done = f"wrote step {step}'s metrics back from the checkpoint {checkpoint}"
    elif saved is None and not any(record.get("step") == step for record in records):
        done = f"step {step}'s metrics are lost: the checkpoint {checkpoint} predates checkpoints keeping them"
    else:
        done = "the steps after the checkpoint are re-run"
    logger.warning("%s: its last line was torn (a crash mid-write): dropped it; %s", path, done)
    return True


def _drop_steps_after(path: Path, last_kept_step: int) -> None:
    """Rewrite ``path`` atomically without the records whose step is after ``last_kept_step``."""
    records = _parse_lines(path.read_text(encoding="utf-8"), path)
    kept = [record for record in records if record.get("step", -1) <= last_kept_step]
    _write_records(path, kept)
    if len(kept) < len(records):
        logger.info("%s: dropped %d step(s) after step %d to resume", path, len(records) - len(kept), last_kept_step)


def _write_records(path: Path, kept: list[dict]) -> None:
    """Rewrite ``path`` atomically with ``kept``, one JSON line each."""
    file_descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(file_descriptor, "w", encoding="utf-8") as file:
            for record in kept:
                file.write(json.dumps(record) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class MetricsLogger:
    """Writes each step's scalar metrics to metrics.jsonl, TensorBoard, wandb and (optionally) the console."""

    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        console: bool = False,
        config: dict | None = None,
        resume_from_step: int | None = None,
    ) -> None:
        """Open the sinks in ``run_dir``; with ``resume_from_step=N``, steps after N already logged are dropped."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.console = console
        if resume_from_step is not None and self.path.exists():
            _drop_steps_after(self.path, resume_from_step)
        self._file = self.path.open("a", encoding="utf-8")
        self._tensorboard = self._open_tensorboard(resume_from_step) if tensorboard else None
        self._wandb_run = self._open_wandb(wandb_project, config, resumed=resume_from_step is not None)

    def _open_tensorboard(self, resume_from_step: int | None):
        if importlib.util.find_spec("tensorboard") is None:
            logger.warning(
                "logging.tensorboard is on but tensorboard is not installed, so no TensorBoard files are written "
                "(metrics.jsonl and report.html have every metric); pip install tensorboard, or set "
                "logging.tensorboard: false"
            )
            return None
        from torch.utils.tensorboard import SummaryWriter

        # purge_step makes TensorBoard discard events at or after it that an earlier run left behind.
        purge_step = None if resume_from_step is None else resume_from_step + 1
        return SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge_step)

    def _open_wandb(self, project: str | None, config: dict | None, *, resumed: bool):
        if project is None:
            return None
        if importlib.util.find_spec("wandb") is None:
            logger.warning(
                "logging.wandb_project=%r is set but wandb is not installed, so nothing goes to wandb; pip "
                "install wandb",
                project,
            )
            return None
        import wandb

        id_file = self.run_dir / WANDB_RUN_ID_FILE
        run_id = id_file.read_text().strip() if resumed and id_file.exists() else None
        try:
            run = wandb.init(
                project=project, config=config, dir=str(self.run_dir), name=self.run_dir.name, id=run_id, resume="allow"
            )
        except Exception as error:  # not logged in, offline without WANDB_MODE, ...: keep training
            logger.warning("wandb.init failed (%s); skipping wandb logging", error)
            return None
        id_file.write_text(run.id)
        return run

    def log(self, step: int, metrics: dict[str, float]) -> dict:
        """Record one step's metrics in every enabled sink; returns the record written to metrics.jsonl."""
        record = {"step": step, **{key: _json_scalar(value) for key, value in metrics.items()}}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        numbers = {key: value for key, value in record.items() if key != "step" and is_plotted_number(value)}
        if self._tensorboard is not None:
            for key, value in numbers.items():
                self._tensorboard.add_scalar(key, value, global_step=step)
            self._tensorboard.flush()
        if self._wandb_run is not None:
            self._wandb_run.log(numbers, step=step)
        if self.console:
            print(f"step {step}: " + " ".join(f"{key}={_format_number(value)}" for key, value in numbers.items()))
        return record

    def close(self) -> None:
        """Flush and close every sink; safe to call twice."""
        if not self._file.closed:
            self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _format_number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4g}"
