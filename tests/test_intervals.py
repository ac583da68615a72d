"""The 95 % intervals results are reported with, against hand-computed numbers: Wilson's for 0/1 values, the
bootstrap's otherwise, and separation (two intervals that do not overlap)."""

import pytest

from sparring.algorithms import Estimate, bootstrap_interval, estimate, separation, wilson_interval


def test_wilson_interval_matches_hand_computed_values():
    # 15/16: centre (p + z²/2n)/(1 + z²/n) = 1.057546/1.240091 = 0.852797, half-width 0.136084.
    assert wilson_interval(15, 16) == pytest.approx((0.716713, 0.988881), abs=1e-6)
    # 0/10: the upper end is z²/(n + z²) = 3.841459/13.841459.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)
    # 5/10: symmetric about 1/2, half-width z·sqrt(0.025 + z²/400)/(1 + z²/10) = 0.2634.
    assert wilson_interval(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    with pytest.raises(ValueError, match="at least one trial"):
        wilson_interval(0, 0)


def test_bootstrap_interval_matches_hand_computed_values():
    # Two values 0 and 2: resampled means are 0, 1, 2 with probability 1/4, 1/2, 1/4 -> 2.5 % at 0, 97.5 % at 2.
    assert bootstrap_interval([0.0, 2.0]) == (0.0, 2.0)
    assert bootstrap_interval([0.3] * 5) == pytest.approx((0.3, 0.3))
    low, high = bootstrap_interval(list(range(100)))
    assert low < 49.5 < high and high - low == pytest.approx(2 * 1.96 * 28.87 / 10, rel=0.15)  # ≈ the normal interval
    assert bootstrap_interval([1.0, 5.0, 2.0]) == bootstrap_interval([1.0, 5.0, 2.0]), "a fixed seed"


def test_estimate_picks_wilson_for_0_1_values_and_bootstrap_otherwise_and_separation_needs_disjoint_intervals():
    assert estimate([1, 0, 1, 1]) == Estimate(0.75, *wilson_interval(3, 4), 4, "wilson")
    assert estimate([0.5, 1.0]).method == "bootstrap"
    with pytest.raises(ValueError):
        estimate([])
    a, b, c = (
        Estimate(0.9, 0.8, 1.0, 10, "wilson"),
        Estimate(0.5, 0.3, 0.7, 10, "wilson"),
        Estimate(0.75, 0.6, 0.85, 10, "wilson"),
    )
    assert separation(a, b) == "above" and separation(b, a) == "below" and separation(a, c) is None
