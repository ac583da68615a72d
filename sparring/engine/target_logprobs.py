"""log p(target) through the LM head as one autograd op: `TargetLogprobs`.

The learner needs one number per position, log softmax(h W^T)[target], but
the vocabulary-wide steps between make it the costliest elementwise work of
a training step (49,152 logits a position for SmolLM2): `log_softmax` writes
a second [K, V] tensor, `gather`'s backward fills a third with zeros to
scatter into, and `log_softmax`'s backward reads two and writes a fourth.
`TargetLogprobs` keeps the logits alone: forward their log-sum-exp and the
target's entry, backward the softmax made from the saved logits, scaled and
corrected at the targets in place, and a matmul into the hidden states'
gradient, a block of rows at a time in one small workspace. Same values as
the composite (up to float rounding); the head's weight gets no gradient, so
a trained head (LoRA on it) keeps the composite path. With `pack`, on CPU in
float32, the head's two matmuls run through oneDNN-packed copies of W and W^T
(`packed_weights.packed_frozen`). On CPU in float32, where `cpu_kernels` are
built, the vocabulary-wide passes run through them: the log-sum-exp reads
each row twice and writes nothing, the backward's softmax gradient is one
read and one write a row (torch's ops: six passes each way).
"""

from __future__ import annotations

import torch

from . import cpu_kernels
from .packed_weights import packable, packed_frozen, packed_matmul

# Rows of logits the vocabulary-wide work takes at a time, in one workspace reused for every block: a fresh tensor
# of all the logits' size (100 MB for 512 rows of SmolLM2) cost ~30 ms of page faults on the 2-core machine, three
# times the pass itself.
_ROWS_PER_BLOCK = 128


class TargetLogprobs(torch.autograd.Function):
    """log_softmax(hidden @ weight^T + bias)[k, targets[k]] per row k, with the gradient for hidden only; `pack`: the
    matmuls through oneDNN-packed copies of the weight (float32 CPU weights only)."""

    @staticmethod
    def forward(
        ctx,
        hidden_K_H: torch.Tensor,
        weight_V_H: torch.Tensor,
        bias_V: torch.Tensor | None,
        targets_K: torch.Tensor,
        pack: bool,
    ) -> torch.Tensor:
        if pack:
            logits_K_V = packed_matmul(hidden_K_H, packed_frozen(weight_V_H), bias_V)
        else:
            logits_K_V = (
                hidden_K_H @ weight_V_H.t() if bias_V is None else torch.addmm(bias_V, hidden_K_H, weight_V_H.t())
            )
        logits_K_V = logits_K_V.to(
            torch.promote_types(logits_K_V.dtype, torch.float32)
        )  # at least float32, as the composite's
        if _kernels_run(logits_K_V):
            log_normaliser_K = cpu_kernels.log_sum_exp_rows(logits_K_V)
        else:
            log_normaliser_K = logits_K_V.amax(-1)
            workspace = _workspace(logits_K_V)
            for rows in _blocks(len(logits_K_V)):
                log_normaliser_K[rows] += _exp_shifted(logits_K_V, log_normaliser_K, rows, workspace).sum(-1).log_()
        ctx.save_for_backward(logits_K_V, log_normaliser_K, weight_V_H, targets_K)
        ctx.hidden_dtype, ctx.pack = hidden_K_H.dtype, pack
        return logits_K_V.gather(-1, targets_K[:, None]).squeeze(-1) - log_normaliser_K

    @staticmethod
    def backward(ctx, grad_K: torch.Tensor):
        logits_K_V, log_normaliser_K, weight_V_H, targets_K = ctx.saved_tensors
        grad_hidden_K_H = torch.empty(
            len(logits_K_V), weight_V_H.shape[1], dtype=ctx.hidden_dtype, device=logits_K_V.device
        )
        workspace = _workspace(logits_K_V)
        transposed = packed_frozen(weight_V_H, transposed=True) if ctx.pack else None
        kernels, grad_K, targets_K = (
            _kernels_run(logits_K_V),
            grad_K.to(logits_K_V.dtype).contiguous(),
            targets_K.contiguous(),
        )
        for rows in _blocks(len(logits_K_V)):
            # d/dlogits of (logit[target] - logsumexp) is onehot(target) - softmax.
            if kernels:
                grad_B_V = cpu_kernels.target_logprob_gradient(
                    logits_K_V[rows],
                    log_normaliser_K[rows],
                    grad_K[rows],
                    targets_K[rows],
                    workspace[: rows.stop - rows.start],
                )
            else:
                grad_B_V = _exp_shifted(logits_K_V, log_normaliser_K, rows, workspace).mul_(-grad_K[rows, None])
                grad_B_V.scatter_add_(-1, targets_K[rows, None], grad_K[rows, None])
            if transposed is None:
                torch.mm(grad_B_V.to(ctx.hidden_dtype), weight_V_H, out=grad_hidden_K_H[rows])
            else:
                grad_hidden_K_H[rows] = packed_matmul(grad_B_V, transposed)
        return grad_hidden_K_H, None, None, None, None


def _kernels_run(logits_K_V: torch.Tensor) -> bool:
    """Whether `cpu_kernels` take the vocabulary-wide passes (float32 CPU logits, where they are built)."""
    return logits_K_V.device.type == "cpu" and logits_K_V.dtype == torch.float32 and cpu_kernels.available()


def _blocks(rows: int) -> list[slice]:
    return [slice(start, min(start + _ROWS_PER_BLOCK, rows)) for start in range(0, rows, _ROWS_PER_BLOCK)]


def _exp_shifted(logits_K_V: torch.Tensor, shift_K: torch.Tensor, rows: slice, workspace: torch.Tensor) -> torch.Tensor:
    """exp(logits - shift) of a block of rows, written into the workspace."""
    return torch.sub(logits_K_V[rows], shift_K[rows, None], out=workspace[: rows.stop - rows.start]).exp_()


def _workspace(logits_K_V: torch.Tensor) -> torch.Tensor:
    return logits_K_V.new_empty(min(len(logits_K_V), _ROWS_PER_BLOCK), logits_K_V.shape[1])


def target_logprobs(
    lm_head: torch.nn.Module, hidden_K_H: torch.Tensor, targets_K: torch.Tensor, pack: bool = False
) -> torch.Tensor | None:
    """`TargetLogprobs` through a plain, frozen linear head (packed where `pack` and the weight is float32 on CPU);
    None when the head is anything else (the caller then runs the composite)."""
    if (
        type(lm_head) is not torch.nn.Linear
        or lm_head.weight.requires_grad
        or (lm_head.bias is not None and lm_head.bias.requires_grad)
    ):
        return None
    return TargetLogprobs.apply(
        hidden_K_H, lm_head.weight, lm_head.bias, targets_K, pack and packable([lm_head.weight])
    )
