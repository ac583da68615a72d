"""Held-out evaluation: the model and scripted baselines on the same tasks, every number with a 95 % interval.

A `PolicyEvaluation` is one column of the comparison: one policy (the
configured model at some training step, or a scripted baseline) that played
each held-out task once, and an `Estimate` (mean and 95 % interval, see
`algorithms.intervals`) per metric, computed from the per-episode values
(`episode_values`), not from a mean alone. A `Comparison` is the whole table:
its columns, the subject (the trained model) and, per other column, the
metrics where the subject's interval lies entirely above or below that
column's -- the only differences it calls an improvement or a shortfall.

Baselines play through the same workflow as the model: `evaluate_baselines`
hands the workflow a `ScriptedChatModel` wherever it would get a trainable
model (frozen auxiliary models stay as they are), so a baseline episode is
the same game with a different player. `Comparison.write` stores the whole
comparison as JSON; `PolicyEvaluation.flat` gives the metrics.jsonl keys
(`<prefix><metric>`, `.../ci_low`, `.../ci_high`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..algorithms import METHODS_NOTE, Estimate, estimate, separation
from ..integrations import TunerHandle
from ..logging import ConsoleProgress
from ..logging.report import EVALUATION_FILE
from ..rollout import Episode, RunnerSettings, ScriptedChatModel, run_episodes
from ..rollout.workflow import EpisodeFn
from .models import TrainingModels


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
