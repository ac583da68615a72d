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
one function and one entry. A spec marked `term` (the entropy bonus) is no loss
of its own: `elementwise_loss` adds it to the chosen loss when its config key
(`entropy_coef`) is non-zero, so it rides along any policy loss, off by default.
`register_loss` adds a loss written elsewhere (the training config's
`loss_fn: package.module:function` calls it after importing the function);
nothing here imports a module by name, so a server that hands a client's
`loss_fn` string to `get_loss` only ever runs registered losses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

Tensor = torch.Tensor
LossFn = Callable[[Tensor, Mapping[str, Tensor], Mapping[str, float]], Tensor]
"""`loss(target_logprobs_M, inputs, config) -> loss_M`; see `register_loss` for the contract."""


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


def entropy_bonus(target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]) -> Tensor:
    """-entropy_coef * H on the trained tokens (advantage != 0), H estimated from the sampled token alone.

    Per token the value is coef * r * log p (r = p/q): -coef times the entropy estimate r * (-log p). The gradient is
    coef * r * log p * grad log p, the score-function estimate of -coef * grad H (the +1 of grad(p log p) drops out,
    E_p[grad log p] = 0): minimising it raises the policy's entropy, rarely sampled tokens most. No full-vocabulary
    pass.
    """
    trained = (inputs["advantages"] != 0).to(target_logprobs.dtype)
    weight = (_ratio(target_logprobs, inputs) * target_logprobs).detach()
    return config.get("entropy_coef", 0.0) * trained * weight * (1.0 + target_logprobs - target_logprobs.detach())


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

    term: bool = False
    """An additive term rather than a loss: added to the chosen loss when one of its config keys is non-zero."""

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
    "entropy_bonus": LossSpec(entropy_bonus, _POLICY_INPUTS, ("entropy_coef",), gradient_input="advantages", term=True),
}


def register_loss(name: str, loss: LossFn | LossSpec) -> LossSpec:
    """Add `loss` to LOSSES as `name` (replacing an entry of that name); returns its spec.

    A loss is `loss(target_logprobs_M, inputs, config) -> loss_M`:
      - `target_logprobs_M`: float [M], the learner's log-probability of each target token, with gradient;
      - `inputs`: the datums' loss inputs by name, each [M] -- for an RL loss `target_tokens` (int64),
        `logprobs` (the sampler's log-probabilities) and `advantages` (float, 0 on prompt tokens);
      - `config`: the `loss_fn_config` values (floats) by key;
      - returns float [M], the loss of each token; the learner sums it (no mean) and backpropagates.
    M is the tokens of one or several sequences end to end (a micro-batch), so loss_M[i] may depend on position i
    only. A plain function is an RL loss: it reads those three inputs and no config key (entropy_coef aside), and
    its positions whose advantage is 0 get no gradient. A `LossSpec` states other inputs, config keys or gradient
    gating itself.
    """
    spec = loss if isinstance(loss, LossSpec) else LossSpec(loss, _POLICY_INPUTS, (), gradient_input="advantages")
    if not callable(spec.fn):
        raise ValueError(
            f"{name!r} is a {type(spec.fn).__name__}, not a loss function loss(target_logprobs, inputs, config)"
        )
    try:
        inspect.signature(spec.fn).bind(None, {}, {})
    except TypeError as error:
        raise ValueError(
            f"{name!r} takes {inspect.signature(spec.fn)}, but a loss is called as loss(target_logprobs, "
            f"inputs, config): {error}"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): calling it will tell
    LOSSES[name] = spec
    return spec


def get_loss(name: str) -> LossSpec:
    losses = sorted(name for name, spec in LOSSES.items() if not spec.term)
    if name not in LOSSES:
        raise ValueError(f"unknown loss_fn {name!r}; choose one of {losses}")
    if LOSSES[name].term:
        raise ValueError(
            f"{name!r} is a term added to a loss (set {' / '.join(LOSSES[name].config_keys)} in "
            f"loss_fn_config), not a loss_fn; choose one of {losses}"
        )
    return LOSSES[name]


def _terms_on(config: Mapping[str, float]) -> list[LossSpec]:
    """The additive terms `config` switches on (a non-zero value for one of their keys)."""
    return [spec for spec in LOSSES.values() if spec.term and any(config.get(key) for key in spec.config_keys)]


def elementwise_loss(
    name: str, target_logprobs: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float]
) -> Tensor:
    """The per-token loss `name`, plus every additive term `config` switches on (e.g. entropy_coef)."""
    loss = get_loss(name).fn(target_logprobs, inputs, config)
    if not isinstance(loss, Tensor) or loss.shape != target_logprobs.shape:
        got = f"shape {list(loss.shape)}" if isinstance(loss, Tensor) else f"a {type(loss).__name__}"
        raise ValueError(
            f"loss_fn {name!r} returned {got}; a loss returns one value per token, shape {list(target_logprobs.shape)}"
        )
    for term in _terms_on(config):
        loss = loss + term.fn(target_logprobs, inputs, config)
    return loss


def advantage_weighted_losses() -> list[str]:
    """The losses that add nothing where a token's advantage is 0 and read no input beyond target_tokens, logprobs
    and advantages: the ones an RL loop can train with when its datums carry those, with an advantage only on sampled
    tokens (prompt positions hold placeholder logprobs)."""
    return [
        name
        for name, spec in LOSSES.items()
        if spec.gradient_input == "advantages" and not spec.term and set(spec.required_inputs) <= set(_POLICY_INPUTS)
    ]


def check_loss_config(name: str, config: Mapping[str, float] | None) -> dict[str, float]:
    """`config` as floats, after checking that the loss `name` exists and reads every key of it (its own, or those of
    an additive term whose inputs it has)."""
    spec = get_loss(name)
    terms = [term for term in LOSSES.values() if term.term and set(term.required_inputs) <= set(spec.required_inputs)]
    accepted = [*spec.config_keys, *(key for term in terms for key in term.config_keys)]
    config = dict(config or {})
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ValueError(f"loss_fn_config keys {unknown} are not used by {name!r}; it accepts {accepted}")
    return {key: float(value) for key, value in config.items()}
