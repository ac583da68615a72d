"""Entropy steering: the entropy bonus's coefficient moved every step towards a target entropy.

One fixed `entropy_coef` does not hold a policy's entropy where GRPO keeps learning: on tic-tac-toe one value kept
one seed sharp, left another loose for 60 steps and let a third collapse (dev/LOG.md, 2026-11-28).
`EntropySteering` adjusts the coefficient instead, as SAC adjusts its
temperature: each step, once the step's entropy is measured (`collapse/entropy`) and before its update uses the
coefficient, log(coefficient) moves by `rate` * (target - entropy), clipped to [`low`, `high`]. A policy sharper
than the target gets a stronger bonus, one looser than it a weaker one, down to `low`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EntropySteering:
    """The entropy bonus's coefficient of the coming update, and the rule that moves it."""

    target: float
    """Mean entropy per sampled token (nats) to hold the policy at."""
    rate: float
    """How far log(coefficient) moves per nat the step's entropy misses the target."""
    low: float
    """The smallest coefficient: the bonus never quite switches off, so it can come back within a few steps."""
    high: float
    """The largest coefficient: bounds how hard the bonus can push against the policy gradient."""
    coef: float
    """The coefficient of the last update (the first one's before any step)."""

    def step(self, entropy: float | None) -> float:
        """The coefficient for an update whose sampled tokens had this mean entropy (None: none sampled, unchanged)."""
        if entropy is not None:
            self.coef = min(max(self.coef * math.exp(self.rate * (self.target - entropy)), self.low), self.high)
        return self.coef
