"""The step sequence: what every training step does around its rollout and its update, written once.

`StepSequence.begin` opens a step: a pending stop signal ends the run here,
the snapshot opponents due are retaken and the league's snapshot is taken,
the held-out tasks are evaluated when due, the sampler is reseeded, the next
batch of tasks is taken, and the step hooks see it (`step_hooks.py`).
`StepSequence.finish` closes it after its update: failing, untrained and
collapsing steps are warned about, the hooks see the step, and it is logged,
shown and checkpointed when due. The on-policy loop (`loop.py`) runs begin
-> rollout -> update -> finish, one step after the other; the pipeline
(`pipeline.py`) begins and plays the rollouts of later steps while an
earlier one trains, and finishes the steps in order. The one difference,
which weights a rollout samples, is a `RolloutWeights`: the live ones
(`LiveWeights`, on-policy) or a frozen older version (the pipeline's).

The sequence also keeps the `ResumePoint` of each step it has reached (the
task stream, RNGs and opponents as the step's rollout is about to start),
from which a checkpoint of that step resumes exactly; the pipeline adds the
older weights its pending rollouts sample (`FrozenVersions`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..integrations import TunerHandle
from ..logging import MetricsLogger, RolloutWriter, TrainingProgress
from ..rollout import Episode
from .checkpoints import ResumePoint, save_checkpoint
from .evaluation import Comparison, PolicyEvaluation, evaluate_baselines, evaluate_policy
from .failure_streak import FailureStreak
from .models import TrainingModels
from .prefill_meter import PrefillMeter
from .resolve import ResolvedRun
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
        """Retake the snapshot opponents due at the start of `step` from these weights."""


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


class FrozenVersions(Protocol):
    """Older weights that rollouts not yet trained on sample (the pipeline's): a checkpoint must name them."""

    def pending_versions(self, step: int) -> dict[int, dict[str, str]]:
        """Version -> model key -> saved path of the weights the rollouts from `step` on sample, as a checkpoint at
        `step` must name them."""


@dataclass
class StepRecord:
    """What a run's steps and evaluations have produced so far."""

    steps: int
    """Optimizer steps taken in total (resumed ones included)."""
    history: list[dict] = field(default_factory=list)
    """Metrics of every step this process trained."""
    evaluations: list[dict] = field(default_factory=list)
    """Evaluation metrics, with their 'step'."""
    columns: list[PolicyEvaluation] = field(default_factory=list)
    """Held-out evaluations of the model (in step order) and of the baselines (once, beside the first)."""


class StepSequence:
    """The phases of every training step, and the bookkeeping they share: logging, warnings, checkpoints, resume points."""

    def __init__(
        self,
        run: ResolvedRun,
        run_dir: Path,
        start_step: int,
        logger: MetricsLogger,
        progress: TrainingProgress,
        stop: StopSignals,
        hooks: list[StepHook],
        trained_before: bool,
    ) -> None:
        """`trained_before`: a resumed run whose earlier steps trained tokens (a run that trains none fails at its end)."""
        self.run = run
        self.run_dir = run_dir
        self.models = run.models
        self.algorithm = run.config.algorithm
        self.logger = logger
        self.progress = progress
        self.stop = stop
        self.hooks = hooks
        self.rollouts = RolloutWriter(run_dir) if run.config.logging.save_rollouts else None
        """Where each trained step's episodes are written (by `step.learn`); None when the config turns it off."""
        self.streak = FailureStreak(self.algorithm.stop_after_failed_steps)
        self.signal = TrainingSignal(trained_before=trained_before)
        self.meter = PrefillMeter(self.models)
        self.record = StepRecord(steps=start_step)
        self.eval_tasks = run.eval_tasks[: self.algorithm.eval_tasks] if self.algorithm.eval_tasks else run.eval_tasks
        self.evaluates = bool(self.eval_tasks)
        """Whether the run evaluates held-out tasks (before training as configured, and after it)."""
        self.points: dict[int, ResumePoint] = {}
        """The resume point of each step reached and not yet outdated by a later finished step."""
        self.frozen: FrozenVersions | None = None
        """The pipeline's older weights, when rollouts run ahead of training; None on-policy."""
        self.reach(start_step)

    def reach(self, step: int) -> None:
        """Record where the rollout of `step` starts (the first call for a step counts): before its snapshots,
        evaluation and tasks."""
        self.points.setdefault(step, ResumePoint.now(self.run.stream, self.models))

    def resume_point(self, step: int) -> ResumePoint:
        """What a checkpoint after `step` steps holds."""
        point = self.points[step]
        return point if self.frozen is None else dataclasses.replace(point, versions=self.frozen.pending_versions(step))

    async def begin(self, step: int, weights: RolloutWeights) -> StepStart:
        """Open `step`: an empty prefix cache, snapshots and league, the evaluation when due, the reseed, its tasks, the hooks."""
        self.stop.check()
        self.reach(step)
        await self.models.empty_prefix_caches()
        await weights.retake_snapshots(step)
        if self.models.league is not None:
            self.models.league.refresh(step)
        if self.evaluates and self.algorithm.evaluates_before(step):
            await self.evaluate(step, "untrained" if step == 0 else f"step {step}", weights.tuner_factory(training=False))
        self.models.reseed(self.algorithm.seed, step)
        start = StepStart(step, next(self.run.stream), weights.version, self.models.snapshot_ages(weights.version))
        for hook in self.hooks:
            await call_hook(hook.before_rollout, start)
        return start

    async def finish(self, step: int, metrics: dict[str, float], episodes: list[Episode]) -> bool:
        """Close a trained step: warnings, hooks, logging, the checkpoint when due; True when the run must stop
        (every episode failing for `stop_after_failed_steps` steps)."""
        failing = self.streak.observe(episodes)
        untrained = self.signal.observe(episodes, metrics)
        warning = failing or (None if self.algorithm.allow_nothing_trained else untrained) or self.signal.collapse_warning(metrics)
        if warning:
            log.warning("step %d: %s", step + 1, warning)
        for hook in self.hooks:
            metrics.update(await call_hook(hook.after_training, StepEnd(step, dict(metrics), episodes)) or {})
        metrics.update(self.meter.take().metrics())
        self.record.history.append(metrics)
        self.logger.log(step + 1, metrics)
        self.progress.update(step + 1, metrics)
        self.record.steps = step + 1
        self.reach(step + 1)
        for outdated in [s for s in self.points if s <= step]:
            del self.points[outdated]
        if self.algorithm.save_interval_steps and (step + 1) % self.algorithm.save_interval_steps == 0:
            if self.frozen is None:
                self.checkpoint()
            else:  # off the event loop, so the rollouts running ahead go on while it is written
                await asyncio.to_thread(self.checkpoint)
        return self.streak.exhausted

    def checkpoint(self) -> Path:
        """Write the checkpoint of the last finished step."""
        return save_checkpoint(self.run_dir, self.record.steps, self.models, self.resume_point(self.record.steps))

    async def evaluate(self, at_step: int, label: str, make_tuner: Callable[[], TunerHandle] | None = None) -> None:
        """Play the held-out tasks with `make_tuner`'s weights (default: the live ones) and log them; the baselines
        beside the first evaluation. A stop signal cancels it."""
        await self.stop.cancelling(self._evaluate(at_step, label, make_tuner or self.models.make_tuner))

    async def _evaluate(self, at_step: int, label: str, make_tuner: Callable[[], TunerHandle]) -> None:
        run, record = self.run, self.record
        step_so_far = self.meter.take()
        record.columns.append(await evaluate_policy(run.episode_fn, self.eval_tasks, make_tuner, run.settings, run.judge, label, "model", at_step, self.progress))
        prefill = self.meter.take()
        self.meter.give_back(step_so_far)
        record.evaluations.append({"step": at_step, **record.columns[-1].flat("eval/"), **prefill.metrics("eval/engine/")})
        self.logger.log(at_step, record.evaluations[-1])
        if run.baselines and not any(column.kind == "baseline" for column in record.columns):
            evaluated = await evaluate_baselines(run.episode_fn, self.eval_tasks, self.models, run.settings, run.judge, run.baselines, self.algorithm.seed, self.progress)
            record.columns.extend(evaluated)
            self.logger.log(at_step, {key: value for column in evaluated for key, value in column.flat(f"baseline/{column.label}/").items()})

    def comparison(self) -> Comparison | None:
        """The evaluations as a table: model columns in step order, then the baselines; the last model evaluation is
        the subject. None when nothing was evaluated."""
        models = [column for column in self.record.columns if column.kind == "model"]
        if not models:
            return None
        return Comparison(models + [column for column in self.record.columns if column.kind == "baseline"], subject=models[-1].label)
