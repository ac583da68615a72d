"""A loss and an advantage function written outside sparring, as a user's module holds them, named by import path
('custom_algorithms:plain_policy_gradient') in the configs of tests/test_custom_algorithm.py; and the broken ones
whose configs must be refused. Each working function counts its calls and keeps what it saw, so a test can tell
that training ran it."""

from __future__ import annotations

from collections import Counter

import torch

from sparring.engine import LossSpec

CALLS: Counter[str] = Counter()
"""How many times each working function ran."""
SEEN_ADVANTAGES: list[torch.Tensor] = []
"""The `advantages` input of every call of `plain_policy_gradient`."""
FIXED_ADVANTAGE = 0.375
"""What `fixed_advantage` gives every episode: no built-in estimator gives a group this mean."""


def plain_policy_gradient(
    target_logprobs_M: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict[str, float]
) -> torch.Tensor:
    """REINFORCE on the learner's own log-probabilities, no importance ratio: -log p * A per token."""
    CALLS["plain_policy_gradient"] += 1
    SEEN_ADVANTAGES.append(inputs["advantages"].detach().clone())
    return -target_logprobs_M * inputs["advantages"]


def fixed_advantage(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> torch.Tensor:
    """Every member of the group gets FIXED_ADVANTAGE, whatever its reward."""
    CALLS["fixed_advantage"] += 1
    return torch.full_like(rewards_G, FIXED_ADVANTAGE)


def _scaled_policy_gradient(
    target_logprobs_M: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict[str, float]
) -> torch.Tensor:
    return -config.get("scale", 1.0) * target_logprobs_M * inputs["advantages"]


scaled_policy_gradient = LossSpec(
    _scaled_policy_gradient, ("target_tokens", "logprobs", "advantages"), ("scale",), gradient_input="advantages"
)
"""A loss with a `loss_fn_config` key of its own, which a plain function cannot declare."""

weighted_likelihood = LossSpec(
    lambda target_logprobs_M, inputs, config: -inputs["weights"] * target_logprobs_M,
    ("target_tokens", "weights"),
    (),
    gradient_input="weights",
)
"""Supervised, not RL: it reads `weights`, which the RL loop's datums do not carry."""

NOT_A_FUNCTION = 3


def one_argument_loss(target_logprobs_M: torch.Tensor) -> torch.Tensor:
    return -target_logprobs_M


def positional_only_estimator(rewards_G: torch.Tensor) -> torch.Tensor:
    return rewards_G - rewards_G.mean()


def summed_loss(
    target_logprobs_M: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict[str, float]
) -> torch.Tensor:
    """Returns the sum, not one value per token."""
    return (-target_logprobs_M * inputs["advantages"]).sum()


def one_number_estimator(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> float:
    """Returns a float, not one advantage per member."""
    return 1.0
