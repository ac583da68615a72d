"""Exploration that keeps the learner exact: importance weights for episodes drawn wider than the policy.

Training rollouts may draw from a behaviour distribution q wider than the policy p: `algorithm.exploration` mixes
each constrained token's draw with the uniform over its allowed tokens, `rollout_temperature_floor` raises the
temperature. The policy's own gradient is then E_q[(p / q) * A * grad log p], so `importance_weights` gives every
episode W = prod p / q over the trainable tokens sampled in it (each timeline keeps its sum of log p - log q): the
exact ratio of the whole episode, since its reward depends on every token. W is truncated at `cap` (V-trace's
rho-bar): a little bias for bounded variance. An epsilon mix never needs it (W <= (1 - e) ** -tokens); a raised
temperature can. `weight_advantages` scales each (episode, agent)'s advantage by its episode's W; the datums keep
the model's own logprobs, so a PPO ratio still starts at 1 and the update is W * A * grad log p.
"""

from __future__ import annotations

import math

from ..rollout.types import Episode

Advantages = dict[tuple[int, str], float | list[float]]


def importance_weights(episodes: list[Episode], cap: float) -> tuple[list[float], dict[str, float]]:
    """Each episode's truncated importance weight, and `exploration/*` metrics (empty when every episode was drawn
    from the policy itself)."""
    log_weights = [sum(timeline.log_importance_weight for timeline in episode.timelines) for episode in episodes]
    if not any(log_weights):
        return [1.0] * len(episodes), {}
    raw = [math.exp(min(value, 50.0)) for value in log_weights]
    weights = [min(value, cap) for value in raw]
    metrics = {
        "exploration/weight_mean": sum(weights) / len(weights),
        "exploration/weight_min": min(weights),
        "exploration/weight_max": max(weights),
        "exploration/truncated_share": sum(value > cap for value in raw) / len(raw),
    }
    return weights, metrics


def weight_advantages(advantages: Advantages, weights: list[float]) -> Advantages:
    """`advantages` with each (episode, agent)'s value (or per-call values) times its episode's weight."""
    weighted: Advantages = {}
    for (episode_index, agent), advantage in advantages.items():
        weight = weights[episode_index]
        weighted[(episode_index, agent)] = (
            [weight * value for value in advantage] if isinstance(advantage, list) else weight * advantage
        )
    return weighted
