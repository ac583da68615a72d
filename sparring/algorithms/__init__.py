"""RL algorithms: advantage estimators over episode groups, assembly of episodes into datums, collapse measures, evaluation intervals."""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageResult,
    compute_advantages,
    get_estimator,
    grpo,
    multi_step_grpo,
    reinforce,
    rloo,
)
from .assembly import apply_kl_penalty, assembly_metrics, build_datums, build_sampled_masks
from .collapse import collapse_metrics
from .intervals import METHODS_NOTE, Estimate, bootstrap_interval, estimate, separation, wilson_interval

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageResult",
    "Estimate",
    "METHODS_NOTE",
    "apply_kl_penalty",
    "assembly_metrics",
    "bootstrap_interval",
    "build_datums",
    "build_sampled_masks",
    "collapse_metrics",
    "compute_advantages",
    "estimate",
    "get_estimator",
    "grpo",
    "multi_step_grpo",
    "reinforce",
    "rloo",
    "separation",
    "wilson_interval",
]
