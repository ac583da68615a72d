"""Forward and forward-backward over a list of `Datum`s.

`prepare_data` checks every datum against the loss before any compute (which
datum, which field, what is wrong) and turns its inputs into tensors,
broadcasting a length-1 input (one advantage per sequence) over the
sequence. `run_forward` packs the prepared data into micro-batches under a
token budget, runs the model's backbone once per micro-batch, applies the LM
head only at real (non-padding) positions — with gradient only where the
loss has a non-zero coefficient — and sums the per-token losses. Gradients
accumulate across calls until the optimizer step, as in Tinker.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..types import Datum, ForwardBackwardOutput, TensorData
from .losses import LOSSES, get_loss

KNOWN_INPUTS = tuple(dict.fromkeys(name for spec in LOSSES.values() for name in spec.required_inputs))
"""Every input some loss reads; a datum carrying another is a mistake."""


class DatumError(ValueError):
    """A datum does not fit the loss: names the datum index and the field."""


@dataclass
class PreparedDatum:
    """One datum as tensors, checked and broadcast to its length."""

    tokens_N: torch.Tensor
    """Input token ids."""
    inputs: dict[str, torch.Tensor]
    """Loss inputs, each of shape [N]."""


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
            raise DatumError(f"datum {index}: loss_fn {loss_fn!r} needs loss_fn_inputs {list(required)}; missing {missing}")
        unknown = [key for key in datum.loss_fn_inputs if key not in KNOWN_INPUTS]
        if unknown:
            raise DatumError(f"datum {index}: unknown loss_fn_inputs {unknown}; known are {list(KNOWN_INPUTS)}")
        inputs = {}
        for key, value in datum.loss_fn_inputs.items():
            tensor = _as_tensor(value)
            if tensor.dim() != 1:
                raise DatumError(f"datum {index}: loss_fn_inputs[{key!r}] must be 1-D, got shape {list(tensor.shape)}")
            if key == "target_tokens":
                if len(tensor) != length:
                    raise DatumError(f"datum {index}: target_tokens has {len(tensor)} tokens but model_input has {length}; they must match")
                _check_ids(index, "target_tokens", tensor.tolist(), vocab_size)
                inputs[key] = tensor.long()
                continue
            if len(tensor) == 1:
                tensor = tensor.expand(length)
            elif len(tensor) != length:
                raise DatumError(f"datum {index}: loss_fn_inputs[{key!r}] has length {len(tensor)}; expected {length} (the model_input length) or 1")
            if not torch.isfinite(tensor.float()).all():
                raise DatumError(f"datum {index}: loss_fn_inputs[{key!r}] contains NaN or inf")
            inputs[key] = tensor.float()
        prepared.append(PreparedDatum(tokens_N=torch.tensor(tokens, dtype=torch.long), inputs=inputs))
    return prepared


def _as_tensor(value: TensorData) -> torch.Tensor:
    return value.to_torch() if isinstance(value, TensorData) else torch.as_tensor(value)


def _check_ids(index: int, field: str, ids: list[int], vocab_size: int) -> None:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise DatumError(f"datum {index}: {field} has token ids out of the vocabulary [0, {vocab_size}): {bad[:5]}")


def micro_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Group datum indices (longest first) so each padded micro-batch stays within token_budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for index in order:
        padded = lengths[current[0]] * (len(current) + 1) if current else lengths[index]
        if current and padded > token_budget:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def _target_logprobs(lm_head, hidden_M_H: torch.Tensor, targets_M: torch.Tensor) -> torch.Tensor:
    logits = lm_head(hidden_M_H).float()
    return logits.log_softmax(-1).gather(-1, targets_M[:, None]).squeeze(-1)


def run_forward(
    causal_lm: torch.nn.Module,
    prepared: list[PreparedDatum],
    loss_fn: str,
    loss_config: dict[str, float],
    *,
    backward: bool,
    token_budget: int,
) -> ForwardBackwardOutput:
    """Learner logprobs and summed loss for every datum; with backward, accumulate gradients."""
    loss = get_loss(loss_fn)
    backbone, lm_head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
    device = lm_head.weight.device
    outputs: list[dict[str, TensorData] | None] = [None] * len(prepared)
    total_loss = 0.0
    for batch in micro_batches([len(p.tokens_N) for p in prepared], token_budget):
        width = max(len(prepared[i].tokens_N) for i in batch)
        tokens_B_T = torch.zeros(len(batch), width, dtype=torch.long)
        valid_B_T = torch.zeros(len(batch), width, dtype=torch.bool)
        for row, index in enumerate(batch):
            length = len(prepared[index].tokens_N)
            tokens_B_T[row, :length] = prepared[index].tokens_N
            valid_B_T[row, :length] = True
        inputs = {key: torch.cat([prepared[i].inputs[key] for i in batch]).to(device) for key in prepared[batch[0]].inputs}
        grad_M = loss.gradient_mask(inputs) if backward else torch.zeros(int(valid_B_T.sum()), dtype=torch.bool, device=device)
        with torch.set_grad_enabled(backward):
            hidden_B_T_H = backbone(input_ids=tokens_B_T.to(device), attention_mask=valid_B_T.long().to(device), use_cache=False).last_hidden_state
            hidden_M_H = hidden_B_T_H[valid_B_T.to(device)]  # real positions, datum by datum
            logprobs_M = hidden_M_H.new_zeros(len(hidden_M_H), dtype=torch.float32)
            if grad_M.any():
                logprobs_M = logprobs_M.index_put((grad_M,), _target_logprobs(lm_head, hidden_M_H[grad_M], inputs["target_tokens"][grad_M]))
            if (~grad_M).any():
                with torch.no_grad():
                    rest = _target_logprobs(lm_head, hidden_M_H[~grad_M].detach(), inputs["target_tokens"][~grad_M])
                logprobs_M = logprobs_M.index_put((~grad_M,), rest)
            elementwise_M = loss.fn(logprobs_M, inputs, loss_config)
            batch_loss = elementwise_M.sum()
            if backward and batch_loss.requires_grad:
                batch_loss.backward()
        lengths = [len(prepared[i].tokens_N) for i in batch]
        for index, logprobs_N, loss_N in zip(batch, logprobs_M.detach().split(lengths), elementwise_M.detach().split(lengths)):
            outputs[index] = {"logprobs": TensorData.from_torch(logprobs_N), "elementwise_loss": TensorData.from_torch(loss_N)}
        total_loss += batch_loss.item()
    return ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=outputs,
        metrics={"loss:sum": total_loss, "tokens:sum": float(sum(len(p.tokens_N) for p in prepared))},
    )
