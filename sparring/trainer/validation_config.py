"""The `validation:` section of a job: which of a run's adapters it keeps as `best`, chosen by play on validation tasks.

A run's last adapter is not always its best: in self-play the policy can swing from one snapshot to the next
(docs/results.md, tic-tac-toe). With `validation:` the run plays the validation tasks with its current weights
after every `every_steps` steps from `from_step` on, and after its last step, and keeps the weights that scored best
on `metric` as the sampler weights `best`, beside `final`. The validation tasks are not the held-out ones: a choice
made on those would bias the number they report. How the choice runs is `best_adapter.py`; this file is only what
the YAML says.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .config_limits import MAX_STEPS
from .dataset_config import DatasetConfig
from .schema import ConfigRecord


class ValidationConfig(ConfigRecord):
    """Keep the adapter that plays the validation tasks best, as `best` beside `final`."""

    dataset: DatasetConfig
    """The validation tasks (e.g. training tasks with other `workflow_args`, `limit` to cap each validation's cost);
    never the held-out ones, whose number the choice would bias."""
    every_steps: int = Field(default=5, ge=1, le=MAX_STEPS)
    """Validate after every N-th step (and after the last): each validation plays every validation task once."""
    from_step: int = Field(default=0, ge=0, le=MAX_STEPS)
    """The fewest steps a candidate has taken (0: the untrained weights compete too); later starts save the
    validations of weights that are rarely the best."""
    metric: str = "reward/mean"
    """The evaluation metric that chooses, as `evaluation.json` names it ('reward/mean', 'workflow/<name>', ...)."""
    mode: Literal["max", "min"] = "max"
    """Whether a higher or a lower mean of `metric` is better; a tie keeps the earlier adapter."""

    def due(self, steps: int, total_steps: int) -> bool:
        """Whether the weights after `steps` steps of a `total_steps` run are a candidate."""
        return steps >= self.from_step and (steps % self.every_steps == 0 or steps == total_steps)
