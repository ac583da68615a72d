"""Evaluation: the model and scripted baselines on the same tasks, every number with a 95 % interval; the run's
held-out evaluations; the adapter kept as `best` by validation.

A `PolicyEvaluation` is one column of the comparison: one policy (the configured model at some training step, or a
scripted baseline) that played each held-out task once, and an `Estimate` (mean and 95 % interval,
`algorithms.intervals`) per metric, computed from the per-episode values (`episode_values`), not from a mean alone.
A `Comparison` is the whole table: its columns, the subject (the trained model) and, per other column, the metrics
where the subject's interval lies entirely above or below that column's -- the only differences it calls an
improvement or a shortfall. `Comparison.write` stores it as JSON (`evaluation.json`); `PolicyEvaluation.flat` gives
the metrics.jsonl keys (`<prefix><metric>`, `.../ci_low`, `.../ci_high`). Baselines play through the same workflow as
the model: `evaluate_baselines` hands the workflow a `ScriptedChatModel` wherever it would get a trainable model
(frozen auxiliary models stay as they are), so a baseline episode is the same game with a different player.

`HeldOut` is the run's held-out evaluations: it plays the held-out tasks with the weights it is handed (the live ones,
or the frozen ones the pipeline's rollouts sample), logs the model's column with what prefilling its prompts cost
(kept out of the step's own `engine/` metrics), plays the configured baselines once beside the first evaluation, and
keeps every column for the run's comparison. When an evaluation is due is the step sequence's business
(`pipeline.py`); a stop signal cancels one from the caller.

`BestAdapter` keeps the weights that played the validation tasks best: it plays them with the live weights whenever a
validation is due, logs the column under `validation/` (its prefill counts too), and when the chosen metric beats
every earlier validation saves the weights as the sampler weights `best` of every trainable model. `validation.json`
in the run folder holds every validation and the one chosen; a resumed run reads it back, so it neither repeats a
validation nor forgets the best. Every validation samples from `algorithm.seed` as `sparring eval` does, so `sparring
eval --adapter .../best` on the validation tasks plays the games the choice was made on, and two candidates meet the
same games.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from ..algorithms import METHODS_NOTE, Estimate, estimate, separation
from ..integrations import TunerHandle
from ..logging import ConsoleProgress, MetricsLogger, TrainingProgress
from ..logging.report import EVALUATION_FILE
from ..rollout import Episode, RunnerSettings, ScriptedChatModel, run_episodes
from ..rollout.workflow import EpisodeFn
from .models import PrefillMeter, TrainingModels
from .resolve import ResolvedRun
from .schema import ConfigError
from .sections import ValidationConfig


@dataclass
class PolicyEvaluation:
    """One policy's results on the held-out tasks: a column of the comparison."""

    label: str
    """Column name: 'untrained', 'trained', 'step N', or the baseline's name."""
    kind: Literal["model", "baseline"]
    """A configured model (trainable, perhaps trained) or a scripted baseline."""
    step: int | None
    """Optimizer steps the model had taken when evaluated; None for a baseline."""
    estimates: dict[str, Estimate] = field(default_factory=dict)
    """Per metric ('reward/mean', 'workflow/success', 'role/player/win_rate', ...): mean and 95 % interval."""
    episodes: int = 0
    """Held-out episodes played (one per task)."""

    def flat(self, prefix: str) -> dict[str, float]:
        """Scalars for the metrics log: `<prefix><metric>` (the mean), `.../ci_low`, `.../ci_high`, and
        `<prefix>episodes`."""
        values = {}
        for name, found in self.estimates.items():
            values.update(
                {
                    f"{prefix}{name}": found.mean,
                    f"{prefix}{name}/ci_low": found.low,
                    f"{prefix}{name}/ci_high": found.high,
                }
            )
        values[f"{prefix}episodes"] = float(self.episodes)
        return values

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "kind": self.kind,
            "step": self.step,
            "episodes": self.episodes,
            "metrics": {name: e.to_json() for name, e in self.estimates.items()},
        }


@dataclass
class Comparison:
    """The evaluated policies side by side, and where the subject's intervals separate from the others'."""

    columns: list[PolicyEvaluation]
    """Model evaluations in step order, then the baselines."""
    subject: str
    """Label of the column the others are compared with: the trained model (the last model evaluation)."""

    def column(self, label: str) -> PolicyEvaluation:
        for column in self.columns:
            if column.label == label:
                return column
        raise KeyError(f"no column {label!r}; columns are {[c.label for c in self.columns]}")

    def markers(self) -> dict[str, dict[str, Literal["above", "below"]]]:
        """Per other column: the metrics where the subject's interval lies entirely 'above' or 'below' its interval."""
        subject = self.column(self.subject)
        found: dict[str, dict[str, Literal["above", "below"]]] = {}
        for other in self.columns:
            if other.label == self.subject:
                continue
            found[other.label] = {}
            for name, mine in subject.estimates.items():
                if name in other.estimates and (side := separation(mine, other.estimates[name])) is not None:
                    found[other.label][name] = side
        return found

    def to_json(self) -> dict:
        return {
            "subject": self.subject,
            "intervals": METHODS_NOTE,
            "columns": [column.to_json() for column in self.columns],
            "subject_vs": self.markers(),
        }

    def write(self, path: str | Path) -> Path:
        """Write the comparison as JSON (a directory gets `evaluation.json`); returns the file."""
        path = Path(path)
        if path.is_dir():
            path = path / EVALUATION_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path


def episode_values(episode: Episode) -> dict[str, float]:
    """One episode's metrics as `episode_metrics` names them: its mean reward, per agent and role, the workflow's
    own."""
    values: dict[str, float] = {}
    rewards = list(episode.rewards.values())
    if rewards:
        values["reward/mean"] = sum(rewards) / len(rewards)
    values.update({f"agent/{agent}/reward": reward for agent, reward in episode.rewards.items()})
    by_role: dict[str, list[float]] = {}
    for agent, reward in episode.rewards.items():
        by_role.setdefault(episode.roles.get(agent, agent), []).append(reward)
    values.update({f"role/{role}/reward": sum(found) / len(found) for role, found in by_role.items()})
    for key, value in episode.metrics.items():
        if value is not None:
            values[("" if "/" in key else "workflow/") + key] = float(value)
    return values


def estimates_of(episodes: list[Episode]) -> dict[str, Estimate]:
    """An `Estimate` per metric over the episodes that have a finite value for it."""
    columns: dict[str, list[float]] = {}
    for episode in episodes:
        for name, value in episode_values(episode).items():
            if math.isfinite(value):
                columns.setdefault(name, []).append(value)
    return {name: estimate(values) for name, values in columns.items()}


async def evaluate_policy(
    episode_fn: EpisodeFn,
    tasks: list[dict],
    make_tuner: Callable[[], TunerHandle],
    settings: RunnerSettings,
    judge,
    label: str,
    kind: Literal["model", "baseline"],
    step: int | None,
    seed: int,
    progress: ConsoleProgress | None = None,
) -> PolicyEvaluation:
    """One episode per task, no training, with the models `make_tuner` hands out, sampled from `seed` (every policy
    evaluated from one seed meets the same draws on the same task); counted on `progress` as they finish."""
    counter = progress.episodes(f"eval {label}", len(tasks), final_line=True) if progress is not None else None
    settings = dataclasses.replace(settings, group_size=1)
    episodes = await run_episodes(
        episode_fn, tasks, make_tuner, settings, judge, on_episode=None if counter is None else counter.add, seed=seed
    )
    return PolicyEvaluation(label, kind, step, estimates_of(episodes), len(episodes))


def baseline_tuner(models: TrainingModels, name: str, policy: Callable) -> Callable[[], TunerHandle]:
    """Tuner handles whose trainable models are all the scripted `policy` (the frozen auxiliary models unchanged)."""
    scripted = ScriptedChatModel(policy, name=name)
    policies = {key: scripted for key in models.policies}
    return lambda: TunerHandle(policies=policies, auxiliary_models=models.auxiliary)


async def evaluate_baselines(
    episode_fn: EpisodeFn,
    tasks: list[dict],
    models: TrainingModels,
    settings: RunnerSettings,
    judge,
    baselines: dict[str, Callable],
    seed: int,
    progress: ConsoleProgress | None = None,
) -> list[PolicyEvaluation]:
    """Each baseline on the same tasks as the model, one after the other."""
    return [
        await evaluate_policy(
            episode_fn,
            tasks,
            baseline_tuner(models, name, policy),
            settings,
            judge,
            name,
            "baseline",
            None,
            seed,
            progress,
        )
        for name, policy in baselines.items()
    ]


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


VALIDATION_FILE = "validation.json"
BEST = "best"
"""The sampler weights' name of the chosen adapter (`checkpoints/<model>/sampler_weights/best`)."""


@dataclass
class Validation:
    """One validation: the chosen metric of the weights after `steps` steps, with its 95 % interval."""

    steps: int
    """Optimizer steps the weights had taken."""
    mean: float
    """The metric's mean over the validation tasks: what the choice compares."""
    low: float
    """Lower end of its 95 % interval, so a reader sees how far apart two candidates really are."""
    high: float
    """Upper end of its 95 % interval."""


@dataclass
class BestAdapter:
    """A run's validations so far and the adapter they chose."""

    run: ResolvedRun
    """The run: its `validation:` section and tasks, workflow, judge, settings and models."""
    run_dir: Path
    """Where `validation.json` is kept."""
    meter: PrefillMeter
    """The run's prefill counts: a validation's own are logged with it, not with the step around it."""
    logger: MetricsLogger
    """Where each validation's metrics go."""
    progress: TrainingProgress
    """The console bar of each validation."""
    validations: list[Validation] = field(default_factory=list)
    """Every validation of the run, resumed ones included, in step order."""
    paths: dict[str, str] = field(default_factory=dict)
    """Model key -> path of its `best` sampler weights."""

    @classmethod
    def open(
        cls, run: ResolvedRun, run_dir: Path, meter: PrefillMeter, logger: MetricsLogger, progress: TrainingProgress
    ) -> BestAdapter | None:
        """The run's choice, with what an earlier process of it recorded; None when the config has no `validation:`."""
        if run.config.validation is None:
            return None
        found = cls(run, run_dir, meter, logger, progress)
        if (run_dir / VALIDATION_FILE).exists():
            saved = json.loads((run_dir / VALIDATION_FILE).read_text(encoding="utf-8"))
            found.validations = [Validation(**entry) for entry in saved["validations"]]
            found.paths = saved["paths"]
        return found

    @property
    def config(self) -> ValidationConfig:
        """The `validation:` section (present: `open` makes no BestAdapter without one)."""
        assert self.run.config.validation is not None
        return self.run.config.validation

    @property
    def chosen(self) -> Validation | None:
        """The best validation so far (the earliest of equals), whose weights are the sampler weights `best`."""
        sign = 1 if self.config.mode == "max" else -1
        return max(self.validations, key=lambda validation: sign * validation.mean, default=None)

    def due(self, steps: int, total_steps: int) -> bool:
        """Whether the weights after `steps` steps are a candidate not validated yet."""
        return self.config.due(steps, total_steps) and all(earlier.steps != steps for earlier in self.validations)

    async def validate(self, steps: int, make_tuner: Callable[[], TunerHandle]) -> None:
        """Play the validation tasks with `make_tuner`'s weights (those after `steps` steps); keep them as `best` when
        they beat every earlier candidate."""
        run, metric = self.run, self.config.metric
        seed = run.config.algorithm.seed
        run.models.reseed(seed, 0)
        validation = evaluate_policy(
            run.episode_fn,
            run.validation_tasks,
            make_tuner,
            run.settings,
            run.judge,
            f"validation {steps}",
            "model",
            steps,
            seed,
            self.progress,
        )
        column, prefill = await self.meter.apart(validation)
        self.logger.log(steps, {**column.flat("validation/"), **prefill.metrics("validation/engine/")})
        if metric not in column.estimates:
            raise ConfigError(
                f"validation.metric: {metric!r} is not a metric of the validation games; they have "
                f"{sorted(column.estimates)}"
            )
        found = column.estimates[metric]
        self.validations.append(Validation(steps, found.mean, found.low, found.high))
        if self.chosen is self.validations[-1]:
            self.paths = run.models.save_for_sampler(BEST)
        self._write()

    def _write(self) -> None:
        chosen = self.chosen
        record = {
            "metric": self.config.metric,
            "mode": self.config.mode,
            "chosen": asdict(chosen) if chosen else None,
            "paths": self.paths,
            "validations": [asdict(validation) for validation in self.validations],
        }
        path = self.run_dir / VALIDATION_FILE
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)
