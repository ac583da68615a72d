"""RL algorithms: advantage estimators over episode groups, assembly of episodes into datums, collapse measures and
response, exploration weights, entropy steering, league opponent sampling, evaluation intervals."""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageResult,
    compute_advantages,
    get_estimator,
    grpo,
    multi_step_grpo,
    register_estimator,
    reinforce,
    rloo,
)
from .assembly import apply_kl_penalty, assembly_metrics, build_datums, build_sampled_masks
from .collapse import CollapseResponse, collapse_metrics
from .entropy_steering import EntropySteering
from .exploration import importance_weights, weight_advantages
from .intervals import METHODS_NOTE, Estimate, bootstrap_interval, estimate, separation, wilson_interval
from .opponent_sampling import (
    OUTCOMES,
    OpponentRecord,
    draw_opponents,
    draw_probabilities,
    eviction_choice,
    pfsp_weight,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageResult",
    "CollapseResponse",
    "EntropySteering",
    "Estimate",
    "METHODS_NOTE",
    "OUTCOMES",
    "OpponentRecord",
    "apply_kl_penalty",
    "assembly_metrics",
    "bootstrap_interval",
    "build_datums",
    "build_sampled_masks",
    "collapse_metrics",
    "compute_advantages",
    "draw_opponents",
    "draw_probabilities",
    "estimate",
    "eviction_choice",
    "get_estimator",
    "grpo",
    "importance_weights",
    "multi_step_grpo",
    "pfsp_weight",
    "register_estimator",
    "reinforce",
    "rloo",
    "separation",
    "weight_advantages",
    "wilson_interval",
]
