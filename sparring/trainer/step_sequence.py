"""The step sequence: what every training step does around its rollout and its update, written once.

`StepSequence.begin` opens a step: a pending stop signal ends the run here,
the snapshot opponents due are retaken and the league's snapshot is taken,
the held-out tasks are evaluated when due (`held_out.py`), the weights are
validated when due and kept as `best` when they play best (`best_adapter.py`), the sampler is
reseeded, the next batch of tasks is taken, and the step hooks see it
(`step_hooks.py`). `StepSequence.finish` closes it after its update:
failing, untrained and collapsing steps are warned about, the hooks see the
step, it is logged and shown, the next step's resume point is recorded
(`resume_points.py`; the run loop writes the checkpoint when due). The run loop
(`pipeline.py`) begins and plays each step's rollout, then trains and
finishes the steps in order; at `max_staleness` 0 a rollout waits for the
weights of the step before, above it rollouts run ahead. Which weights a
rollout samples is a `RolloutWeights`: the live ones (`LiveWeights`) or a
frozen older version (`FrozenWeights`, `pipeline.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..integrations import TunerHandle
from ..logging import MetricsLogger, RolloutWriter, TrainingProgress
from ..rollout import Episode
from .best_adapter import BestAdapter
from .failure_streak import FailureStreak
from .held_out import HeldOut
from .models import TrainingModels
from .prefill_meter import PrefillMeter
from .resolve import ResolvedRun
from .resume_points import ResumePoints
from .step_hooks import StepEnd, StepHook, StepStart, call_hook
from .stop_signals import StopSignals
from .training_signal import TrainingSignal

log = logging.getLogger(__name__)


class RolloutWeights(Protocol):
    """The weights a step's rollout, and the evaluation before it, sample."""

    version: int
    """Optimizer steps those weights have taken."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        """Tuners on these weights: for the rollout (`training`: its temperature floor applies) or an evaluation."""

    async def retake_snapshots(self, step: int) -> None:
        """Retake the snapshot opponents due at the start of `step`, and the league's snapshot, from these weights."""


@dataclass
class LiveWeights:
    """The weights being trained, as the on-policy loop samples them."""

    models: TrainingModels
    """The run's models."""
    version: int
    """Optimizer steps taken: the step about to run."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        return self.models.make_training_tuner if training else self.models.make_tuner

    async def retake_snapshots(self, step: int) -> None:
        self.models.refresh_snapshots(step)
        if self.models.league is not None:
            self.models.league.refresh(step)


@dataclass
class StepRecord:
    """What a run's steps have produced so far."""

    steps: int
    """Optimizer steps taken in total (resumed ones included)."""
    history: list[dict] = field(default_factory=list)
    """Metrics of every step this process trained."""


class StepSequence:
    """The phases of every training step, and the bookkeeping they share: logging, warnings, evaluations,
    checkpoints."""

    def __init__(
        self,
        run: ResolvedRun,
        run_dir: Path,
        start_step: int,
        logger: MetricsLogger,
        progress: TrainingProgress,
        stop: StopSignals,
        hooks: list[StepHook],
        previous_metrics: list[dict],
    ) -> None:
        """`previous_metrics`: the logged metrics of a resumed run's earlier steps (empty for a new run)."""
        self.run = run
        self.run_dir = run_dir
        self.models = run.models
        self.warm_started = run.config.warm_start is not None or any(
            model.adapter_path for model in run.config.trainable_models().values()
        )
        """A trainable model starts from a saved adapter or a warm start: its step-0 evaluation is labelled 'step 0',
        not 'untrained'."""
        self.algorithm = run.config.algorithm
        self.logger = logger
        self.progress = progress
        self.stop = stop
        self.hooks = hooks
        self.points = ResumePoints(run_dir, run.stream, self.models, start_step, run.config.checkpoints.keep)
        self.rollouts = RolloutWriter(run_dir) if run.config.logging.save_rollouts else None
        """Where each trained step's episodes are written (by `step.learn`); None when the config turns it off."""
        self.streak = FailureStreak(self.algorithm.stop_after_failed_steps)
        self.signal = TrainingSignal(
            trained_before=any(record.get("tokens/trained", 0.0) > 0 for record in previous_metrics)
        )
        self.entropy = (
            self.algorithm.entropy_target.steering(previous_metrics) if self.algorithm.entropy_target else None
        )
        """The entropy bonus's steered coefficient (`step.learn` moves it); None without `algorithm.entropy_target`."""
        response = self.algorithm.collapse_response
        self.collapse = response.response(self.algorithm.exploration, previous_metrics) if response else None
        """The exploration the collapse response sets (`step.learn` moves it); None without
        `algorithm.collapse_response`."""
        if self.collapse is not None:
            self.models.rollout_exploration = self.collapse.exploration
        self.meter = PrefillMeter(self.models)
        self.record = StepRecord(steps=start_step)
        eval_tasks = run.eval_tasks[: run.config.evaluation.max_tasks or None]
        self.held_out = HeldOut(run, eval_tasks, self.meter, logger, progress)
        self.best = BestAdapter.open(run, run_dir, self.meter, logger, progress)
        """The validations that choose the adapter kept as `best`; None without `validation:`."""

    async def begin(self, step: int, weights: RolloutWeights) -> StepStart:
        """Open `step`: an empty prefix cache, snapshots and league, the evaluation and validation when due, the reseed,
        its tasks, the hooks."""
        self.stop.check()
        await self.models.empty_prefix_caches()
        await weights.retake_snapshots(step)
        snapshot_ages = self.models.snapshot_ages(weights.version)
        if self.held_out.evaluates and self.run.config.evaluation.evaluates_before(step):
            label = "untrained" if step == 0 and not self.warm_started else f"step {step}"
            await self.stop.cancelling(self.held_out.evaluate(step, label, weights.tuner_factory(training=False)))
        await self.validate(step, weights.tuner_factory(training=False))
        self.models.reseed(self.algorithm.seed, step)
        start = StepStart(step, next(self.run.stream), weights.version, snapshot_ages)
        for hook in self.hooks:
            await call_hook(hook.before_rollout, start)
        return start

    async def validate(self, steps: int, make_tuner: Callable[[], TunerHandle]) -> None:
        """Validate the weights after `steps` steps (`make_tuner`'s) when they are a candidate not validated yet."""
        if self.best is not None and self.best.due(steps, self.run.stream.num_steps):
            await self.stop.cancelling(self.best.validate(steps, make_tuner))

    async def finish(self, step: int, metrics: dict[str, float], episodes: list[Episode]) -> bool:
        """Close a trained step: warnings, hooks, logging, the next resume point; True when the run must stop
        (every episode failing for `stop_after_failed_steps` steps)."""
        failing = self.streak.observe(episodes)
        untrained = self.signal.observe(episodes, metrics)
        warning = (
            failing
            or (None if self.algorithm.allow_nothing_trained else untrained)
            or self.signal.collapse_warning(metrics)
        )
        if warning:
            log.warning("step %d: %s", step + 1, warning)
        for hook in self.hooks:
            metrics.update(await call_hook(hook.after_training, StepEnd(step, dict(metrics), episodes)) or {})
        metrics.update(self.meter.take().metrics())
        self.record.history.append(metrics)
        logged = self.logger.log(step + 1, metrics)
        self.progress.update(step + 1, metrics)
        self.record.steps = step + 1
        self.points.advance(step + 1, logged)
        return self.streak.exhausted
