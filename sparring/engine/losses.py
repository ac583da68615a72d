"""Token-level losses with Tinker's semantics, as pure functions of tensors.

Every loss takes the learner's log-probabilities of the target tokens and the
datum's loss inputs (all shaped `[N]` for one sequence, or any common shape),
and returns the per-token loss; the caller sums it (Tinker losses are
sum-reduced, never averaged). Keeping them pure makes them device-agnostic and
testable against a plain reference on the CPU.

`LOSS_INPUTS` names the inputs each loss needs, so a malformed datum is
rejected before any compute.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

Tensor = torch.Tensor
LossFn = Callable[[Tensor, Mapping[str, Tensor], Mapping[str, float]], Tensor]


def cross_entropy(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """Weighted negative log-likelihood: -weights * log p(target)."""
    return -inputs["weights"] * target_logprobs


def _ratio(target_logprobs: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
    return torch.exp(target_logprobs - inputs["logprobs"])


def importance_sampling(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """REINFORCE corrected for the sampler: -(p/q) * A."""
    return -_ratio(target_logprobs, inputs) * inputs["advantages"]


def ppo(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """Clipped surrogate: -min(r * A, clip(r, low, high) * A)."""
    ratio = _ratio(target_logprobs, inputs)
    clipped = ratio.clamp(config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2))
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, clipped * advantages)


def cispo(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """Clipped ratio as a stop-gradient weight on the policy gradient: -sg(clip(r)) * log p * A."""
    ratio = _ratio(target_logprobs, inputs)
    clipped = ratio.clamp(config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)).detach()
    return -clipped * target_logprobs * inputs["advantages"]


def dro(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """Policy gradient with a quadratic penalty on the log-ratio: -(log p * A - beta/2 * (log p - log q)^2)."""
    beta = config.get("beta", 0.05)
    penalty = (target_logprobs - inputs["logprobs"]) ** 2
    return -(target_logprobs * inputs["advantages"] - 0.5 * beta * penalty)


LOSSES: dict[str, LossFn] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
}

_POLICY_INPUTS = ("target_tokens", "logprobs", "advantages")
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": _POLICY_INPUTS,
    "ppo": _POLICY_INPUTS,
    "cispo": _POLICY_INPUTS,
    "dro": _POLICY_INPUTS,
}
LOSS_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "cross_entropy": (),
    "importance_sampling": (),
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
    "dro": ("beta",),
}


def get_loss(name: str) -> LossFn:
    if name not in LOSSES:
        raise ValueError(f"unknown loss_fn {name!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[name]


def check_loss_config(name: str, config: Mapping[str, float] | None) -> dict[str, float]:
    get_loss(name)
    config = dict(config or {})
    unknown = sorted(set(config) - set(LOSS_CONFIG_KEYS[name]))
    if unknown:
        raise ValueError(f"loss_fn_config keys {unknown} are not used by {name!r}; it accepts {list(LOSS_CONFIG_KEYS[name])}")
    return {key: float(value) for key, value in config.items()}
