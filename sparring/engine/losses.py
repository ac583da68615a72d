"""Token-level losses with Tinker's semantics, as pure functions of tensors, and their registry.

Every loss takes the learner's log-probabilities of the target tokens and the
datum's loss inputs (all shaped `[N]` for one sequence, or any common shape),
and returns the per-token loss; the caller sums it (Tinker losses are
sum-reduced, never averaged). Keeping them pure makes them device-agnostic and
testable against a plain reference on the CPU.

`LOSSES` holds one `LossSpec` per loss name: the function, the inputs a datum
must carry (so a malformed datum is rejected before any compute), the
`loss_fn_config` keys it reads, and the input that gates its gradient. The
learner and the config validation take everything from it, so a new loss is
one function and one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class LossSpec:
    """One loss: everything the learner and the config validation need to know about it."""

    fn: LossFn
    """The per-token loss."""
    required_inputs: tuple[str, ...]
    """The loss_fn_inputs every datum must carry; a datum without one is rejected before any compute."""
    config_keys: tuple[str, ...]
    """The loss_fn_config keys it reads; any other key is a mistake and rejected."""
    gradient_input: str | None
    """The input whose zero positions add neither loss nor gradient, so the learner runs the LM head there without
    gradient; None when every position counts."""

    def gradient_mask(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """Positions whose loss depends on the model output (the rest need logits without gradient)."""
        if self.gradient_input is None:
            return torch.ones_like(inputs["target_tokens"], dtype=torch.bool)
        return inputs[self.gradient_input] != 0


_POLICY_INPUTS = ("target_tokens", "logprobs", "advantages")
_CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens", "weights"), (), gradient_input="weights"),
    "importance_sampling": LossSpec(importance_sampling, _POLICY_INPUTS, (), gradient_input="advantages"),
    "ppo": LossSpec(ppo, _POLICY_INPUTS, _CLIP_KEYS, gradient_input="advantages"),
    "cispo": LossSpec(cispo, _POLICY_INPUTS, _CLIP_KEYS, gradient_input="advantages"),
    "dro": LossSpec(dro, _POLICY_INPUTS, ("beta",), gradient_input=None),
}


def get_loss(name: str) -> LossSpec:
    if name not in LOSSES:
        raise ValueError(f"unknown loss_fn {name!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[name]


def advantage_weighted_losses() -> list[str]:
    """The losses that add nothing where a token's advantage is 0: the ones an RL loop can train with when its
    datums carry an advantage only on sampled tokens (prompt positions hold placeholder logprobs)."""
    return [name for name, spec in LOSSES.items() if spec.gradient_input == "advantages"]


def check_loss_config(name: str, config: Mapping[str, float] | None) -> dict[str, float]:
    """`config` as floats, after checking that the loss `name` exists and reads every key of it."""
    accepted = get_loss(name).config_keys
    config = dict(config or {})
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ValueError(f"loss_fn_config keys {unknown} are not used by {name!r}; it accepts {list(accepted)}")
    return {key: float(value) for key, value in config.items()}
