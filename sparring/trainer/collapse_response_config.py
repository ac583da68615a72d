"""The `algorithm.collapse_response` section: what the trainer does when a step's groups keep tying.

What the YAML says and its checks; the rule is `algorithms.collapse.CollapseResponse`. The exploration of every
rollout is logged as `collapse/exploration`, and a resumed run continues from the last one logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from .schema import ConfigRecord

if TYPE_CHECKING:
    from ..algorithms import CollapseResponse

EXPLORATION_METRIC = "collapse/exploration"
"""The metric that logs the exploration the next rollout uses; a resumed run reads the last one back."""


class CollapseResponseConfig(ConfigRecord):
    """Widen the training rollouts' exploration while groups tie, narrow it back once they differ."""

    zero_variance_bound: float = Field(default=0.5, ge=0.0, lt=1.0)
    """A step whose share of tied groups (`advantage/zero_variance_fraction`) is above this counts as tied."""
    patience: int = Field(default=2, ge=1, le=1000)
    """Tied steps in a row before the response acts: one tied step is noise, two a trend."""
    factor: float = Field(default=2.0, gt=1.0, le=100.0)
    """How much one response multiplies the exploration (and one untied step divides it, down to the configured)."""
    min_exploration: float = Field(default=0.1, gt=0.0, lt=1.0)
    """The exploration the first response sets at least (a configured 0 cannot be multiplied up)."""
    max_exploration: float = Field(default=0.5, gt=0.0, lt=1.0)
    """The most exploration the response sets: half the draws still follow the policy."""

    def response(self, base: float, previous_metrics: list[dict]) -> CollapseResponse:
        """The response of a run configured with exploration `base` whose earlier steps logged `previous_metrics`."""
        from ..algorithms import CollapseResponse  # here: reading a config must not import torch

        logged = [record[EXPLORATION_METRIC] for record in previous_metrics if EXPLORATION_METRIC in record]
        exploration = logged[-1] if logged else base
        high = max(self.max_exploration, base)
        return CollapseResponse(
            base, self.zero_variance_bound, self.patience, self.factor, self.min_exploration, high, exploration
        )
