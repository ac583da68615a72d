"""Where each step's rollout starts, kept while a checkpoint may need it, and the checkpoints written from it.

`ResumePoints` records the `ResumePoint` of a step (the task stream, RNGs and
opponents as its rollout is about to start: `checkpoints.py`) the first time
the run reaches it, and forgets it once a later step has finished. The
checkpoint after `s` steps holds the point of step `s` (and the metrics
record of step `s`, to repair a torn metrics.jsonl), from which a resumed
run goes on exactly; with rollouts running ahead of training the run loop
adds the older weights its pending rollouts sample. With
`keep_checkpoints` only the newest checkpoints stay (`prune_oldest`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .checkpoints import ResumePoint, prune_oldest, save_checkpoint
from .dataset import TaskStream
from .models import TrainingModels


class ResumePoints:
    """The resume point of every step reached and not yet outdated, and the checkpoints written from them."""

    def __init__(
        self, run_dir: Path, stream: TaskStream, models: TrainingModels, first_step: int, keep: int | None = None
    ) -> None:
        self.run_dir = run_dir
        self.stream = stream
        self.models = models
        self.keep = keep
        """Checkpoints kept (`checkpoints.keep`): older ones are deleted after each save; None keeps all."""
        self.reached: dict[int, ResumePoint] = {}
        """Step -> where its rollout starts, for each step reached and not yet outdated by a later finished step."""
        self.logged: dict[int, dict] = {}
        """Steps finished -> the record metrics.jsonl got for it, kept in its checkpoint (to repair a torn line)."""
        self.reach(first_step)

    def reach(self, step: int) -> None:
        """Record where the rollout of `step` starts (the first call for a step counts): before its snapshots,
        evaluation and tasks."""
        self.reached.setdefault(step, ResumePoint.now(self.stream, self.models))

    def advance(self, steps: int, logged: dict | None = None) -> None:
        """`steps` steps have finished (`logged`: the metrics record of the last): reach the next one and forget the
        points of those before it."""
        self.reach(steps)
        for outdated in [step for step in self.reached if step < steps]:
            del self.reached[outdated]
        if logged is not None:
            self.logged = {steps: logged}

    def checkpoint(self, steps: int, versions: dict[int, dict[str, str]] | None = None) -> Path:
        """Write the checkpoint after `steps` steps; `versions`: the older weights (version -> model key -> saved path)
        that the rollouts from `steps` on sample, when they run ahead of training."""
        point = self.reached[steps]
        if versions:
            point = dataclasses.replace(point, versions=versions)
        saved = save_checkpoint(self.run_dir, steps, self.models, point, self.logged.get(steps))
        if self.keep is not None:
            prune_oldest(self.run_dir, self.keep)
        return saved
