"""RL algorithms: advantage estimators over episode groups, and assembly of episodes into datums."""

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

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageResult",
    "apply_kl_penalty",
    "assembly_metrics",
    "build_datums",
    "build_sampled_masks",
    "compute_advantages",
    "get_estimator",
    "grpo",
    "multi_step_grpo",
    "reinforce",
    "rloo",
]
