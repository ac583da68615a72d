"""Each loss against a plain per-token reference computation, values and gradients."""

import math

import pytest
import torch

from sparring.engine.losses import LOSSES, check_loss_config


def reference_loss(name, target_logprobs, inputs, config):
    """Sum over tokens, written out one token at a time with Python floats."""
    total = 0.0
    low, high = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    for i, lp in enumerate(target_logprobs):
        if name == "cross_entropy":
            total += -inputs["weights"][i] * lp
            continue
        q, a = inputs["logprobs"][i], inputs["advantages"][i]
        ratio = math.exp(lp - q)
        if name == "importance_sampling":
            total += -ratio * a
        elif name == "ppo":
            total += -min(ratio * a, min(max(ratio, low), high) * a)
        elif name == "cispo":
            total += -min(max(ratio, low), high) * lp * a
        elif name == "dro":
            total += -(lp * a - 0.5 * config.get("beta", 0.05) * (lp - q) ** 2)
    return total


def numeric_grad(name, values, inputs, config, eps=1e-6):
    grads = []
    for i in range(len(values)):
        up, down = list(values), list(values)
        up[i] += eps
        down[i] -= eps
        grads.append(
            (reference_loss(name, up, inputs, config) - reference_loss(name, down, inputs, config)) / (2 * eps)
        )
    return grads


@pytest.mark.parametrize(
    "name", sorted(name for name, spec in LOSSES.items() if not spec.term)
)  # terms: tests/test_league.py
@pytest.mark.parametrize("config", [{}, {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}, {"beta": 0.3}])
def test_loss_matches_reference_value_and_gradient(name, config):
    config = {k: v for k, v in config.items() if k in LOSSES[name].config_keys}
    generator = torch.Generator().manual_seed(0)
    n = 12
    target = -torch.rand(n, generator=generator, dtype=torch.float64) * 3
    inputs = {
        "weights": torch.rand(n, generator=generator, dtype=torch.float64),
        # Sampler logprobs close to and far from the learner's, so some ratios clip and some do not.
        "logprobs": target + torch.randn(n, generator=generator, dtype=torch.float64) * 0.4,
        "advantages": torch.randn(n, generator=generator, dtype=torch.float64),
    }
    learner = target.clone().requires_grad_(True)
    loss = LOSSES[name].fn(learner, inputs, config).sum()
    loss.backward()
    plain_inputs = {k: v.tolist() for k, v in inputs.items()}
    assert loss.item() == pytest.approx(reference_loss(name, target.tolist(), plain_inputs, config), rel=1e-9, abs=1e-9)
    if name == "cispo":
        # The clipped ratio is a stop-gradient weight: d/dlp = -clip(r) * A.
        ratio = torch.exp(target - inputs["logprobs"]).clamp(
            config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
        )
        expected = (-ratio * inputs["advantages"]).tolist()
    else:
        expected = numeric_grad(name, target.tolist(), plain_inputs, config)
    assert learner.grad.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_ppo_clips_only_in_the_direction_of_the_advantage():
    lp = torch.tensor([0.0, 0.0], requires_grad=True)
    inputs = {"logprobs": torch.log(torch.tensor([0.5, 2.0])), "advantages": torch.tensor([1.0, -1.0])}
    # ratio 2 with A>0 and ratio 0.5 with A<0: both beyond the clip range, both clipped: no gradient.
    LOSSES["ppo"].fn(lp, inputs, {}).sum().backward()
    assert lp.grad.tolist() == [0.0, 0.0]


def test_loss_config_rejects_unknown_keys_and_losses():
    with pytest.raises(ValueError, match="clip_low_threshold"):
        check_loss_config("ppo", {"clip_lo": 0.5})
    with pytest.raises(ValueError, match="unknown loss_fn 'grpo'"):
        check_loss_config("grpo", {})
    assert check_loss_config("dro", {"beta": 1}) == {"beta": 1.0}
