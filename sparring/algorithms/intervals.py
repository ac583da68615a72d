"""95 % intervals for evaluation means: how far a held-out number can be trusted.

An `Estimate` is a mean over episodes with its interval. `estimate(values)`
picks the method from the values: the Wilson score interval when every
per-episode value is 0 or 1 (success, win rate, error: a binomial
proportion, where the normal approximation fails near 0 and 1), and a
percentile bootstrap of the mean otherwise (reward, turns: no distribution
assumed; fixed seed, so the same values always give the same interval).
`separation(a, b)` says whether `a`'s interval lies entirely above or below
`b`'s: only then is a difference called an improvement (or a shortfall).
Pure functions of numbers, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

LEVEL = 0.95
Z_95 = 1.959963984540054
"""The standard normal quantile at 0.975: a two-sided 95 % interval."""
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
METHODS_NOTE = (
    "95 % intervals: Wilson score for 0/1 metrics (success, win rate, error); "
    f"percentile bootstrap of the mean ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}) for the others."
)


@dataclass(frozen=True)
class Estimate:
    """A mean over episodes and its 95 % interval."""

    mean: float
    """The mean of the per-episode values."""
    low: float
    """Lower end of the interval."""
    high: float
    """Upper end of the interval."""
    n: int
    """How many episodes had a value."""
    method: Literal["wilson", "bootstrap"]
    """How the interval was computed: Wilson (all values 0/1) or percentile bootstrap."""

    def to_json(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "method": self.method}


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion `successes / n`."""
    if n <= 0:
        raise ValueError(f"a proportion needs at least one trial, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Rounding can put an end a hair outside [0, 1] (or past p at p = 0 or 1).
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def bootstrap_interval(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: the (1-level)/2 and (1+level)/2 quantiles of resampled means."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("a bootstrap interval needs at least one value")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(low), float(high)


def estimate(values: Sequence[float]) -> Estimate:
    """The mean of `values` with a Wilson interval (all 0/1) or a bootstrap interval (anything else)."""
    data = [float(value) for value in values]
    if not data:
        raise ValueError("an estimate needs at least one value")
    if not all(math.isfinite(value) for value in data):
        raise ValueError(f"values must be finite numbers, got {data}")
    mean = sum(data) / len(data)
    if all(value in (0.0, 1.0) for value in data):
        low, high = wilson_interval(int(sum(data)), len(data))
        return Estimate(mean, low, high, len(data), "wilson")
    low, high = bootstrap_interval(data)
    return Estimate(mean, low, high, len(data), "bootstrap")


def separation(a: Estimate, b: Estimate) -> Literal["above", "below"] | None:
    """'above' when `a`'s interval lies entirely above `b`'s, 'below' when entirely below, else None (not resolved)."""
    if a.low > b.high:
        return "above"
    if a.high < b.low:
        return "below"
    return None
