"""The run's held-out evaluations: each one played, logged, and kept for the comparison they add up to.

`HeldOut` plays the held-out tasks with the weights it is handed (the live
ones, or the frozen ones the pipeline's rollouts sample), logs the model's
column with what prefilling its prompts cost (kept out of the step's own
`engine/` metrics), plays the configured baselines once beside the first
evaluation, and keeps every column for the run's comparison table
(`evaluation.json`). When an evaluation is due is the step sequence's
business (`step_sequence.py`); a stop signal cancels one from the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..integrations import TunerHandle
from ..logging import MetricsLogger, TrainingProgress
from .evaluation import Comparison, PolicyEvaluation, evaluate_baselines, evaluate_policy
from .prefill_meter import PrefillMeter
from .resolve import ResolvedRun


@dataclass
class HeldOut:
    """The held-out tasks of a run and every evaluation of them so far."""

    run: ResolvedRun
    """The run: its workflow, judge, settings, models and baselines."""
    tasks: list[dict]
    """The held-out tasks evaluated (the first `evaluation.max_tasks` of them when that is set)."""
    meter: PrefillMeter
    """The run's prefill counts: an evaluation's own are logged with it, not with the step around it."""
    logger: MetricsLogger
    """Where each evaluation's metrics go."""
    progress: TrainingProgress
    """The console bar of each evaluation."""
    evaluations: list[dict] = field(default_factory=list)
    """Evaluation metrics, with their 'step'."""
    columns: list[PolicyEvaluation] = field(default_factory=list)
    """Held-out evaluations of the model (in step order) and of the baselines (once, beside the first)."""

    @property
    def evaluates(self) -> bool:
        """Whether the run evaluates held-out tasks (before training as configured, and after it)."""
        return bool(self.tasks)

    async def evaluate(self, at_step: int, label: str, make_tuner: Callable[[], TunerHandle]) -> None:
        """Play the held-out tasks with `make_tuner`'s weights and log them; the baselines beside the first
        evaluation."""
        run, algorithm = self.run, self.run.config.algorithm
        column, prefill = await self.meter.apart(
            evaluate_policy(
                run.episode_fn,
                self.tasks,
                make_tuner,
                run.settings,
                run.judge,
                label,
                "model",
                at_step,
                algorithm.seed,
                self.progress,
            )
        )
        self.columns.append(column)
        self.evaluations.append({"step": at_step, **column.flat("eval/"), **prefill.metrics("eval/engine/")})
        self.logger.log(at_step, self.evaluations[-1])
        if run.baselines and not any(column.kind == "baseline" for column in self.columns):
            evaluated = await evaluate_baselines(
                run.episode_fn,
                self.tasks,
                run.models,
                run.settings,
                run.judge,
                run.baselines,
                algorithm.seed,
                self.progress,
            )
            self.columns.extend(evaluated)
            self.logger.log(
                at_step,
                {key: value for column in evaluated for key, value in column.flat(f"baseline/{column.label}/").items()},
            )

    def comparison(self) -> Comparison | None:
        """The evaluations as a table: model columns in step order, then the baselines; the last model evaluation is
        the subject. None when nothing was evaluated."""
        models = [column for column in self.columns if column.kind == "model"]
        if not models:
            return None
        return Comparison(
            models + [column for column in self.columns if column.kind == "baseline"], subject=models[-1].label
        )
