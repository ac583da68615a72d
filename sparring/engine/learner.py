"""Forward and forward-backward over a list of `Datum`s.

`prepare_data` checks every datum against the loss before any compute (which
datum, which field, what is wrong) and turns its inputs into tensors,
broadcasting a length-1 input (one advantage per sequence) over the
sequence. `run_forward` lays the prepared data out as prefix trees under a
token budget (`prefix_tree`: every distinct prefix of the datums, such as a
GRPO group's prompt or the turns several episodes played alike, computed
once; padded whole datums, `batch_plan`, for models that cannot), runs the
model's backbone once per micro-batch, applies the LM head only at real
positions — with gradient only where the loss has a non-zero coefficient,
and once for positions of several datums that predict the same token from
the same prefix — and sums the per-token losses. LoRA layers run as one
autograd op each (`lora_matmul`), and so does the head's log p(target) (`target_logprobs`),
on CPU in float32 through oneDNN-packed copies of the frozen weights; there a
Llama-style layer's RMSNorm, rotary and SwiGLU run as one op each too
(`learner_layers`). A caller that reads logprobs at trained positions only
(sparring's trainer) can skip the head everywhere else (`untrained_logprobs`).
Gradients accumulate across calls until the optimizer step, as in Tinker.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..types import Datum, ForwardBackwardOutput, TensorData
from .allowed_tokens import allowed_masks, is_allowed, split_allowed
from .batch_plan import micro_batches
from .learner_layers import fused_layers
from .lora_matmul import fused_lora
from .losses import LOSSES, elementwise_loss, get_loss
from .prefix_tree import plan_tree_batches, runs_as_trees, tree_hidden_states
from .target_logprobs import target_logprobs

CONSTRAINT_INPUTS = ("allowed_counts", "allowed_tokens")
"""The inputs of a datum sampled under a constraint: per position the length of its encoded allowed set (0 where
unconstrained), and those sets concatenated."""
KNOWN_INPUTS = (*dict.fromkeys(name for spec in LOSSES.values() for name in spec.required_inputs), *CONSTRAINT_INPUTS)
"""Every input a built-in loss or the constraint masks read; a datum carrying another (that its loss does not
require) is a mistake."""


class DatumError(ValueError):
    """A datum does not fit the loss: names the datum index and the field."""


@dataclass
class PreparedDatum:
    """One datum as tensors, checked and broadcast to its length."""

    tokens_N: torch.Tensor
    """Input token ids."""
    inputs: dict[str, torch.Tensor]
    """Loss inputs, each of shape [N]."""
    allowed_N: list[list[int]] | None = None
    """Per position, the encoded allowed set of its target ([] where unconstrained); None when nothing is."""


def prepare_data(data: list[Datum], loss_fn: str, vocab_size: int) -> list[PreparedDatum]:
    if not isinstance(data, (list, tuple)) or not data:
        raise DatumError("data must be a non-empty list of Datum")
    required = get_loss(loss_fn).required_inputs
    prepared = []
    for index, datum in enumerate(data):
        if not isinstance(datum, Datum):
            raise DatumError(f"datum {index}: expected a Datum, got {type(datum).__name__}")
        tokens = datum.model_input.to_ints()
        length = len(tokens)
        if length == 0:
            raise DatumError(f"datum {index}: model_input is empty")
        _check_ids(index, "model_input", tokens, vocab_size)
        missing = [key for key in required if key not in datum.loss_fn_inputs]
        if missing:
            raise DatumError(
                f"datum {index}: loss_fn {loss_fn!r} needs loss_fn_inputs {list(required)}; missing {missing}"
            )
        unknown = [key for key in datum.loss_fn_inputs if key not in KNOWN_INPUTS and key not in required]
        if unknown:
            raise DatumError(
                f"datum {index}: unknown loss_fn_inputs {unknown}; known are "
                f"{list(dict.fromkeys([*KNOWN_INPUTS, *required]))}"
            )
        inputs = {}
        allowed_N = _allowed_sets(index, datum, length, vocab_size)
        for key, value in datum.loss_fn_inputs.items():
            if key in CONSTRAINT_INPUTS:
                continue
            tensor = _as_tensor(value)
            if tensor.dim() != 1:
                raise DatumError(f"datum {index}: loss_fn_inputs[{key!r}] must be 1-D, got shape {list(tensor.shape)}")
            if key == "target_tokens":
                if len(tensor) != length:
                    raise DatumError(
                        f"datum {index}: target_tokens has {len(tensor)} tokens but model_input has "
                        f"{length}; they must match"
                    )
                _check_ids(index, "target_tokens", tensor.tolist(), vocab_size)
                inputs[key] = tensor.long()
                continue
            if len(tensor) == 1:
                tensor = tensor.expand(length)
            elif len(tensor) != length:
                raise DatumError(
                    f"datum {index}: loss_fn_inputs[{key!r}] has length {len(tensor)}; expected {length} "
                    "(the model_input length) or 1"
                )
            if not torch.isfinite(tensor.float()).all():
                raise DatumError(f"datum {index}: loss_fn_inputs[{key!r}] contains NaN or inf")
            inputs[key] = tensor.float()
        if allowed_N is not None and "target_tokens" in inputs:
            outside = [
                p
                for p, (entry, target) in enumerate(zip(allowed_N, inputs["target_tokens"].tolist(), strict=True))
                if not is_allowed(entry, target)
            ]
            if outside:
                raise DatumError(
                    f"datum {index}: target_tokens at positions {outside[:5]} are not in their allowed "
                    "sets (allowed_counts/allowed_tokens)"
                )
        prepared.append(
            PreparedDatum(tokens_N=torch.tensor(tokens, dtype=torch.long), inputs=inputs, allowed_N=allowed_N)
        )
    return prepared


def _allowed_sets(index: int, datum: Datum, length: int, vocab_size: int) -> list[list[int]] | None:
    """The datum's per-position encoded allowed sets, checked; None when it carries none."""
    given = [key for key in CONSTRAINT_INPUTS if key in datum.loss_fn_inputs]
    if not given:
        return None
    if len(given) != len(CONSTRAINT_INPUTS):
        raise DatumError(f"datum {index}: loss_fn_inputs {list(CONSTRAINT_INPUTS)} go together; only {given} given")
    counts = _as_tensor(datum.loss_fn_inputs["allowed_counts"]).reshape(-1).tolist()
    tokens = _as_tensor(datum.loss_fn_inputs["allowed_tokens"]).reshape(-1).tolist()
    if len(counts) != length:
        raise DatumError(
            f"datum {index}: allowed_counts has length {len(counts)}; expected {length} (the model_input length)"
        )
    if any(count < 0 for count in counts) or sum(counts) != len(tokens):
        raise DatumError(
            f"datum {index}: allowed_counts must be >= 0 and sum to the length of allowed_tokens "
            f"({len(tokens)}); they sum to {sum(counts)}"
        )
    per_position = split_allowed([int(c) for c in counts], [int(t) for t in tokens])
    for position, entry in enumerate(per_position):
        if entry and any((token < 0) != (entry[0] < 0) for token in entry):
            raise DatumError(f"datum {index}: allowed set at position {position} mixes allowed ids and ~disallowed ids")
        _check_ids(index, "allowed_tokens", [token if token >= 0 else ~token for token in entry], vocab_size)
    return per_position if any(per_position) else None


def _as_tensor(value: TensorData) -> torch.Tensor:
    return value.to_torch() if isinstance(value, TensorData) else torch.as_tensor(value)


def _check_ids(index: int, field: str, ids: list[int], vocab_size: int) -> None:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise DatumError(f"datum {index}: {field} has token ids out of the vocabulary [0, {vocab_size}): {bad[:5]}")


def _target_logprobs(
    lm_head,
    hidden_K_H: torch.Tensor,
    targets_K: torch.Tensor,
    allowed_K: list[list[int]] | None,
    fused: bool,
    pack: bool,
) -> torch.Tensor:
    """log p(target) per row; renormalised over the allowed tokens on rows with an allowed set."""
    constrained = [row for row, entry in enumerate(allowed_K or []) if entry]
    if fused and not constrained and (fused_K := target_logprobs(lm_head, hidden_K_H, targets_K, pack)) is not None:
        return fused_K
    logits_K_V = lm_head(hidden_K_H).float()
    if constrained:
        rows_C = torch.tensor(constrained, device=logits_K_V.device)
        allowed_C_V = allowed_masks([allowed_K[row] for row in constrained], logits_K_V.shape[-1], logits_K_V.device)
        logits_K_V = logits_K_V.index_put(
            (rows_C,), logits_K_V.index_select(0, rows_C).masked_fill(~allowed_C_V, float("-inf"))
        )
    return logits_K_V.log_softmax(-1).gather(-1, targets_K[:, None]).squeeze(-1)


def run_forward(
    causal_lm: torch.nn.Module,
    prepared: list[PreparedDatum],
    loss_fn: str,
    loss_config: dict[str, float],
    *,
    backward: bool,
    token_budget: int,
    prefix_tree: bool = False,
    fused: bool = True,
    pack_weights: bool = False,
    untrained_logprobs: bool = True,
) -> ForwardBackwardOutput:
    """Learner logprobs and summed loss for every datum; with backward, accumulate gradients.

    `prefix_tree` runs each micro-batch as a trie of its datums where the model allows (`prefix_tree`), so every
    prefix they share is computed once; the result is the same as running each datum whole, up to float
    rounding. `token_budget` bounds a micro-batch's trie nodes, or its padded tokens. `fused` runs
    LoRA layers and the head's target logprobs as one autograd op each (same results up to float rounding);
    `pack_weights` also runs their frozen weights' matmuls through oneDNN-packed copies, where float32 on CPU.
    Without `untrained_logprobs`, positions outside the loss's gradient mask (by its contract they add no loss)
    get no LM-head pass: their logprobs are NaN and their loss 0.
    """
    loss = get_loss(loss_fn)
    backbone, lm_head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
    device = lm_head.weight.device
    outputs: list[dict[str, TensorData] | None] = [None] * len(prepared)
    total_loss = 0.0
    tokens = [p.tokens_N for p in prepared]
    as_trees = prefix_tree and runs_as_trees(causal_lm.config)
    untrained = untrained_logprobs or not backward  # a forward alone reports every position
    with (
        fused_lora(causal_lm, pack_weights) if fused else contextlib.nullcontext(),
        fused_layers(causal_lm) if fused else contextlib.nullcontext(),
    ):
        for batch in (
            plan_tree_batches(tokens, token_budget)
            if as_trees
            else micro_batches([len(t) for t in tokens], token_budget)
        ):
            members = [prepared[i] for i in batch.indices]
            inputs = {
                key: torch.cat([member.inputs[key] for member in members]).to(device) for key in members[0].inputs
            }
            grad_M = (
                loss.gradient_mask(inputs)
                if backward
                else torch.zeros(len(inputs["target_tokens"]), dtype=torch.bool, device=device)
            )
            with torch.set_grad_enabled(backward):
                if as_trees:
                    hidden_R_H, rows_M = (
                        tree_hidden_states(backbone, batch, device),
                        torch.cat(batch.nodes_of).to(device),
                    )
                else:
                    hidden_R_H, rows_M = _padded_hidden_states(
                        backbone, [member.tokens_N for member in members], device
                    )
                allowed_M = _concatenated_allowed(members)
                logprobs_M = _position_logprobs(
                    lm_head,
                    hidden_R_H,
                    rows_M,
                    inputs["target_tokens"],
                    grad_M,
                    allowed_M,
                    fused,
                    pack_weights,
                    untrained,
                )
                if untrained:
                    elementwise_M = elementwise_loss(loss_fn, logprobs_M, inputs, loss_config)
                else:  # a loss is position by position: the trained positions alone
                    trained_loss = elementwise_loss(
                        loss_fn, logprobs_M[grad_M], {key: value[grad_M] for key, value in inputs.items()}, loss_config
                    )
                    elementwise_M = trained_loss.new_zeros(len(logprobs_M)).index_put((grad_M,), trained_loss)
                batch_loss = elementwise_M.sum()
                if backward and batch_loss.requires_grad:
                    batch_loss.backward()
            lengths = [len(member.tokens_N) for member in members]
            for index, logprobs_N, loss_N in zip(
                batch.indices, logprobs_M.detach().split(lengths), elementwise_M.detach().split(lengths), strict=True
            ):
                outputs[index] = {
                    "logprobs": TensorData.from_torch(logprobs_N),
                    "elementwise_loss": TensorData.from_torch(loss_N),
                }
            total_loss += batch_loss.item()
    return ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=outputs,
        metrics={"loss:sum": total_loss, "tokens:sum": float(sum(len(p.tokens_N) for p in prepared))},
    )


def _concatenated_allowed(members: list[PreparedDatum]) -> list[list[int]] | None:
    """The members' per-position allowed sets end to end; None when no member has one."""
    if all(member.allowed_N is None for member in members):
        return None
    return [entry for member in members for entry in (member.allowed_N or [[]] * len(member.tokens_N))]


def _padded_hidden_states(
    backbone: torch.nn.Module, tokens: list[torch.Tensor], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backbone's last hidden states at the real positions of datums padded side by side, and each position's
    row."""
    width = max(len(t) for t in tokens)
    tokens_B_T = torch.zeros(len(tokens), width, dtype=torch.long)
    valid_B_T = torch.zeros(len(tokens), width, dtype=torch.bool)
    for row, row_tokens in enumerate(tokens):
        tokens_B_T[row, : len(row_tokens)] = row_tokens
        valid_B_T[row, : len(row_tokens)] = True
    hidden_B_T_H = backbone(
        input_ids=tokens_B_T.to(device), attention_mask=valid_B_T.long().to(device), use_cache=False
    ).last_hidden_state
    hidden_R_H = hidden_B_T_H[valid_B_T.to(device)]  # real positions, row by row
    return hidden_R_H, torch.arange(len(hidden_R_H), device=device)


def _position_logprobs(
    lm_head,
    hidden_R_H: torch.Tensor,
    rows_M: torch.Tensor,
    targets_M: torch.Tensor,
    grad_M: torch.Tensor,
    allowed_M: list[list[int]] | None = None,
    fused: bool = True,
    pack: bool = False,
    untrained: bool = True,
) -> torch.Tensor:
    """log p(target) at every datum position, the LM head applied once per distinct (hidden row, target) pair
    (without `untrained`, only at pairs that need gradient: NaN elsewhere).

    Positions of several datums at one trie node that predict the same token are one pair; a pair gets gradient when
    any of its positions needs it. A constrained position (a non-empty `allowed_M` entry) is a pair of its own,
    renormalised over its allowed set.
    """
    pair_keys_M = rows_M * (int(targets_M.max()) + 1) + targets_M
    if allowed_M is not None:
        constrained_M = torch.tensor([bool(entry) for entry in allowed_M], device=pair_keys_M.device)
        own_keys_M = int(pair_keys_M.max()) + 1 + torch.arange(len(pair_keys_M), device=pair_keys_M.device)
        pair_keys_M = torch.where(constrained_M, own_keys_M, pair_keys_M)
    pair_keys_U, pair_of_M = torch.unique(pair_keys_M, return_inverse=True)
    rows_U = torch.zeros_like(pair_keys_U).index_put_((pair_of_M,), rows_M)
    targets_U = torch.zeros_like(pair_keys_U).index_put_((pair_of_M,), targets_M)
    grad_U = torch.zeros(len(pair_keys_U), dtype=torch.bool, device=grad_M.device).index_put_(
        (pair_of_M,), grad_M, accumulate=True
    )
    allowed_U = None
    if allowed_M is not None:
        position_of_U = (
            torch.zeros_like(pair_keys_U)
            .index_put_((pair_of_M,), torch.arange(len(pair_of_M), device=pair_of_M.device))
            .tolist()
        )
        allowed_U = [allowed_M[position] for position in position_of_U]

    def allowed_of(selected_U: torch.Tensor) -> list[list[int]] | None:
        return None if allowed_U is None else [allowed_U[u] for u in selected_U.nonzero().squeeze(-1).tolist()]

    logprobs_U = hidden_R_H.new_full((len(pair_keys_U),), float("nan"), dtype=torch.float32)
    if grad_U.any():
        logprobs_U = logprobs_U.index_put(
            (grad_U,),
            _target_logprobs(lm_head, hidden_R_H[rows_U[grad_U]], targets_U[grad_U], allowed_of(grad_U), fused, pack),
        )
    if untrained and (~grad_U).any():
        with torch.no_grad():
            rest_U = _target_logprobs(
                lm_head, hidden_R_H[rows_U[~grad_U]].detach(), targets_U[~grad_U], allowed_of(~grad_U), fused, pack
            )
        logprobs_U = logprobs_U.index_put((~grad_U,), rest_U)
    return logprobs_U[pair_of_M]
