"""The `algorithm.entropy_target` section: an entropy bonus whose coefficient is steered towards a target entropy.

What the YAML says and its checks; the rule is `algorithms.entropy_steering`. The coefficient of every update is
logged as `optim/entropy_coef`, and a resumed run continues from the last one logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from .schema import ConfigRecord

if TYPE_CHECKING:
    from ..algorithms import EntropySteering

COEF_METRIC = "optim/entropy_coef"
"""The metric that logs each update's coefficient; a resumed run reads the last one back."""


class EntropyTargetConfig(ConfigRecord):
    """An entropy bonus steered each step towards `target` instead of one fixed `loss_fn_config.entropy_coef`."""

    target: float = Field(gt=0.0, le=20.0)
    """Mean entropy per sampled token (nats, the step's `collapse/entropy`) to hold the policy at."""
    rate: float = Field(default=3.0, gt=0.0, le=100.0)
    """How far log(coefficient) moves per nat the step's entropy misses the target (3: a step 0.1 nat below it
    raises the coefficient by 35 %, one 0.1 nat above lowers it by 26 %)."""
    initial_coef: float = Field(default=0.1, gt=0.0, le=100.0)
    """The coefficient before the first step."""
    min_coef: float = Field(default=0.01, gt=0.0, le=100.0)
    """The smallest coefficient (never 0, and not far below where it acts: it comes back within a few steps once
    the policy sharpens past the target; from 0.01 to 0.1 in 8 steps 0.1 nat below it)."""
    max_coef: float = Field(default=1.0, gt=0.0, le=100.0)
    """The largest coefficient: bounds how hard the bonus pushes against the policy gradient."""

    @model_validator(mode="after")
    def _ordered_bounds(self) -> EntropyTargetConfig:
        if not self.min_coef <= self.initial_coef <= self.max_coef:
            raise ValueError(
                f"entropy_target: needs min_coef <= initial_coef <= max_coef, got {self.min_coef:g}, "
                f"{self.initial_coef:g}, {self.max_coef:g}"
            )
        return self

    def steering(self, previous_metrics: list[dict]) -> EntropySteering:
        """The steering of a run whose earlier steps logged `previous_metrics` (none for a new run)."""
        from ..algorithms import (
            EntropySteering,  # here: reading a config must not import torch (sparring.algorithms does)
        )

        logged = [record[COEF_METRIC] for record in previous_metrics if COEF_METRIC in record]
        coef = logged[-1] if logged else self.initial_coef
        return EntropySteering(self.target, self.rate, self.min_coef, self.max_coef, coef)
