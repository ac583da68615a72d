"""LoRA layers as one autograd op for the learner: `LoraMatmul` and `fused_lora`.

peft computes a LoRA layer as `base(x) + lora_B(lora_A(x)) * scaling`: beside
the matmuls, a pass over the [tokens, out] output to scale the low-rank
product and another to add it, and backward the same two again plus the sum
of the two input gradients: four to five elementwise passes over the layer's
output per forward+backward, 210 layers a pass in SmolLM2 with LoRA on every
projection. On a CPU those passes read and write fresh memory that the
matmuls beside them never touch twice. `LoraMatmul` computes the same
quantity with the low-rank product accumulated into the base matmul's output
by the matmul itself (`addmm_`, the scaling as its alpha), and backward
accumulates the low-rank input gradient into the base one the same way; the
frozen base weight gets no gradient, the LoRA matrices theirs.

`fused_lora(model, pack)` routes every LoRA layer of a model that is a plain
`nn.Linear` under unmerged vanilla LoRA adapters (no dropout, DoRA or LoRA
bias; `ProjectionWeights` decides, as for the sampler's packed weights),
whose base weight is frozen, through it for the length of a block; every
other layer keeps peft's forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from peft.tuners.lora import LoraLayer

from .packed_weights import ProjectionWeights, packable, packed_frozen, packed_matmul


class LoraMatmul(torch.autograd.Function):
    """x @ W^T + bias + sum_i scaling_i * (x @ A_i^T) @ B_i^T, with gradients for x and every A_i, B_i (not W, bias);
    `pack`: W's matmuls through oneDNN-packed copies (float32 CPU weights only)."""

    @staticmethod
    def forward(
        ctx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        pack: bool,
        scalings: tuple[float, ...],
        *lora: torch.Tensor,
    ) -> torch.Tensor:
        x_M_I = x.reshape(-1, x.shape[-1])
        if pack:
            out_M_O = packed_matmul(x_M_I, packed_frozen(weight), bias)
        else:
            out_M_O = x_M_I @ weight.t() if bias is None else torch.addmm(bias, x_M_I, weight.t())
        hidden = []
        for scaling, a_R_I, b_O_R in zip(scalings, lora[0::2], lora[1::2], strict=True):
            h_M_R = x_M_I @ a_R_I.t()
            out_M_O.addmm_(h_M_R, b_O_R.t(), alpha=scaling)
            hidden.append(h_M_R)
        ctx.scalings, ctx.pack = scalings, pack
        ctx.input_shape = x.shape
        ctx.save_for_backward(x_M_I, weight, *lora, *hidden)
        return out_M_O.view(*x.shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x_M_I, weight, *rest = ctx.saved_tensors
        count = len(ctx.scalings)
        lora, hidden = rest[: 2 * count], rest[2 * count :]
        grad_M_O = grad_out.reshape(-1, grad_out.shape[-1])
        grad_x_M_I = None
        if ctx.needs_input_grad[0]:
            grad_x_M_I = (
                packed_matmul(grad_M_O, packed_frozen(weight, transposed=True)) if ctx.pack else grad_M_O @ weight
            )
        grads_lora = []
        for scaling, a_R_I, b_O_R, h_M_R in zip(ctx.scalings, lora[0::2], lora[1::2], hidden, strict=True):
            grad_h_M_R = grad_M_O @ b_O_R
            if grad_x_M_I is not None:
                grad_x_M_I.addmm_(grad_h_M_R, a_R_I, alpha=scaling)
            grads_lora += [torch.mm(grad_h_M_R.t(), x_M_I).mul_(scaling), torch.mm(grad_M_O.t(), h_M_R).mul_(scaling)]
        grad_x = None if grad_x_M_I is None else grad_x_M_I.view(ctx.input_shape)
        return grad_x, None, None, None, None, *grads_lora


def _fused_forward(layer: LoraLayer, part: ProjectionWeights, pack: bool):
    linear = part.linear
    scalings = tuple(float(layer.scaling[name]) for name in part.adapters)
    lora = [t for name in part.adapters for t in (layer.lora_A[name].weight, layer.lora_B[name].weight)]
    pack = pack and packable([linear.weight])
    return lambda x: LoraMatmul.apply(x, linear.weight, linear.bias, pack, scalings, *lora)


def _fusable(layer: torch.nn.Module) -> ProjectionWeights | None:
    """What the layer multiplies by, when `LoraMatmul` computes its forward exactly as peft would."""
    if not isinstance(layer, LoraLayer):
        return None
    part = ProjectionWeights.of(layer)
    if part is None or not part.adapters or part.linear.weight.requires_grad:
        return None
    if part.linear.bias is not None and part.linear.bias.requires_grad:
        return None
    if any(not isinstance(layer.lora_dropout[name], torch.nn.Identity) for name in part.adapters):
        return None
    return part


@contextlib.contextmanager
def fused_lora(model: torch.nn.Module, pack: bool = False) -> Iterator[None]:
    """Within the block, the model's fusable LoRA layers (see the module docstring) compute through `LoraMatmul`,
    their base matmuls packed where `pack` and the weight is float32 on CPU."""
    routed = []
    for module in model.modules():
        part = _fusable(module)
        if part is not None:
            module.forward = _fused_forward(module, part, pack)
            routed.append(module)
    try:
        yield
    finally:
        for module in routed:
            del module.forward
