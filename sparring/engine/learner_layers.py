"""A Llama-style layer's elementwise work for the learner as one autograd op a step: `fused_layers`.

Between its matmuls a transformers Llama layer runs RMSNorm as six ops
(`pow`, `mean`, `rsqrt`, two products, a cast) and autograd saves what each
needs, rotary as `rotate_half`'s slices, negation and `cat` and four
products for q and k, and SwiGLU as `silu` and a product: a pass over fresh
memory each, forward and again backward (the profiler put ~1 s of a 14.6 s
forward+backward of 32 GRPO completions of SmolLM2-135M there, its own cost
per op included). `RmsNorm`, `Rotary` and `SiluProduct` compute each in one
pass forward and one backward through `cpu_kernels`; rotary also writes q
and k straight into the [B, H, T, D] layout attention reads (timings:
benchmarks/README.md; the matmuls beside them are most of the time).

`fused_layers(model)` routes the norms, attention and MLP modules of a
Llama, Qwen2 or Qwen3 model through them for the length of a block (as
`lora_matmul.fused_lora` routes its LoRA layers), where the weights are
float32 on the CPU and the kernels run; elsewhere (CUDA, no C compiler,
another architecture, a trained norm weight) each module keeps its own
forward. Same results up to float rounding.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from . import cpu_kernels

FUSED_ARCHITECTURES = {"llama", "qwen2", "qwen3"}
"""Model types whose RMSNorm is x / sqrt(mean(x^2) + eps) * weight and whose rotary turns the halves of each head."""


class RmsNorm(torch.autograd.Function):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, with the gradient for x only (the weight frozen)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x_M_K = x.reshape(-1, x.shape[-1]).contiguous()
        out_M_K, inverse_M = cpu_kernels.rms_norm_rows(x_M_K, weight, eps)
        ctx.save_for_backward(x_M_K, weight, inverse_M)
        return out_M_K.view(x.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x_M_K, weight, inverse_M = ctx.saved_tensors
        grad_M_K = grad.reshape(x_M_K.shape).contiguous()
        return cpu_kernels.rms_norm_backward(grad_M_K, x_M_K, weight, inverse_M).view(grad.shape), None, None


class Rotary(torch.autograd.Function):
    """A projection's output [B, T, H D] rotated per head as Llama's `apply_rotary_pos_emb`, as [B, H, T, D]."""

    @staticmethod
    def forward(ctx, x_B_T_HD: torch.Tensor, cos_B_T_D: torch.Tensor, sin_B_T_D: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x_B_T_HD.shape
        x_B_T_H_D = x_B_T_HD.reshape(batch, length, -1, cos_B_T_D.shape[-1]).contiguous()
        ctx.save_for_backward(cos_B_T_D, sin_B_T_D)
        return cpu_kernels.rotary(x_B_T_H_D, cos_B_T_D, sin_B_T_D)

    @staticmethod
    def backward(ctx, grad_B_H_T_D: torch.Tensor):
        cos_B_T_D, sin_B_T_D = ctx.saved_tensors
        grad_B_T_H_D = cpu_kernels.rotary(grad_B_H_T_D.contiguous(), cos_B_T_D, sin_B_T_D, inverse=True)
        return grad_B_T_H_D.flatten(2), None, None


class SiluProduct(torch.autograd.Function):
    """silu(gate) * up, SwiGLU's activation."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        return cpu_kernels.silu_product(gate, up)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gate, up = ctx.saved_tensors
        return cpu_kernels.silu_product_backward(grad.contiguous(), gate, up)


def _norm_forward(norm: torch.nn.Module):
    return lambda hidden_states: RmsNorm.apply(hidden_states, norm.weight, norm.variance_epsilon)


def _mlp_forward(mlp: torch.nn.Module):
    return lambda x: mlp.down_proj(SiluProduct.apply(mlp.gate_proj(x), mlp.up_proj(x)))


def _attention_forward(attention: torch.nn.Module):
    """transformers' Llama attention forward with both rotations in `Rotary` (no cache: the learner runs whole
    sequences)."""
    own_forward = type(attention).forward
    eager = sys.modules[type(attention).__module__].eager_attention_forward

    def forward(hidden_states, position_embeddings, attention_mask=None, cache=None, past_key_values=None, **kwargs):
        cos_B_T_D, sin_B_T_D = position_embeddings
        if cache is not None or past_key_values is not None or cos_B_T_D.shape[-1] != attention.head_dim:
            return own_forward(
                attention,
                hidden_states,
                position_embeddings,
                attention_mask,
                cache=cache if cache is not None else past_key_values,
                **kwargs,
            )
        batch, length = hidden_states.shape[:2]
        cos_B_T_D, sin_B_T_D = (t.expand(batch, length, -1).contiguous() for t in (cos_B_T_D, sin_B_T_D))
        query_B_H_T_D = Rotary.apply(attention.q_proj(hidden_states), cos_B_T_D, sin_B_T_D)
        key_B_Hk_T_D = Rotary.apply(attention.k_proj(hidden_states), cos_B_T_D, sin_B_T_D)
        value_B_Hk_T_D = attention.v_proj(hidden_states).view(batch, length, -1, attention.head_dim).transpose(1, 2)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, eager)
        dropout = attention.attention_dropout if attention.training else 0.0
        out, weights = attend(
            attention,
            query_B_H_T_D,
            key_B_Hk_T_D,
            value_B_Hk_T_D,
            attention_mask,
            dropout=dropout,
            scaling=attention.scaling,
            **kwargs,
        )
        return attention.o_proj(out.reshape(batch, length, -1).contiguous()), weights

    return forward


def _routes(model: torch.nn.Module) -> list[tuple[torch.nn.Module, object]]:
    """(module, its fused forward) for every module of the model `fused_layers` can route."""
    config = model.config.get_text_config()
    weight = model.get_input_embeddings().weight
    if (
        config.model_type not in FUSED_ARCHITECTURES
        or weight.device.type != "cpu"
        or weight.dtype != torch.float32
        or not cpu_kernels.available()
    ):
        return []
    routes = []
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm") and not module.weight.requires_grad and module.weight.dtype == torch.float32:
            routes.append((module, _norm_forward(module)))
        elif name.endswith("MLP") and config.hidden_act == "silu":
            routes.append((module, _mlp_forward(module)))
        elif (
            name.endswith("Attention")
            and not hasattr(module, "q_norm")
            and getattr(module, "sliding_window", None) is None
            and module.head_dim % 2 == 0
        ):
            routes.append((module, _attention_forward(module)))
    return routes


@contextlib.contextmanager
def fused_layers(model: torch.nn.Module) -> Iterator[bool]:
    """Within the block, the model's norms, attention and MLP modules run through the fused ops where it allows (see
    the module docstring); yields whether any does."""
    routes = _routes(model)
    for module, forward in routes:
        module.forward = forward
    try:
        yield bool(routes)
    finally:
        for module, _ in routes:
            del module.forward
