"""The fast decoder's projections: its linear layers as functions of their input (`decoder.FastDecoder`).

`projection` (one layer), `projections` (layers that read the same input, fused into one matmul where they can)
and `head_projection` (the LM head) multiply by packed copies of the weights with the active LoRA adapter folded in
(`packed_weights`; through `cpu_kernels.row_matmul` when `Packing.rows`), or by the weights themselves, fused
weights made one buffer (`_shared_buffer`) so a merged adapter lands in them too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft.tuners.tuners_utils import BaseTunerLayer

from .cpu_kernels import row_matmul
from .packed_weights import ProjectionWeights, packable, packed, packed_matmul

Projection = Callable[[torch.Tensor], torch.Tensor]
# Several linear layers applied to one input: their outputs, in order.
Projections = Callable[[torch.Tensor], tuple[torch.Tensor, ...]]
# Up to this many rows, CPU projections multiply W @ x^T (see `projections`).
_FEW_ROWS = 64
# Bytes: where the CPU allocator starts every tensor, and where `_shared_buffer` wants weights to start.
_ALIGNMENT = 64


@dataclass(frozen=True)
class Packing:
    """How projections multiply by packed copies of their weights (`packed_weights`); None where they use the
    weights."""

    rows: bool
    """Plain copies through `cpu_kernels.row_matmul` (few rows at a time: a decode step), else oneDNN-packed ones."""


def unwrapped(linear: torch.nn.Module) -> torch.nn.Module:
    """The plain layer under a peft LoRA layer whose forward would only call it (adapters merged, or disabled), else
    the layer."""
    if isinstance(linear, BaseTunerLayer) and linear.merged != linear.disable_adapters:
        return linear.get_base_layer()
    return linear


def projection(linear: torch.nn.Module, pack: Packing | None) -> Projection:
    """A linear layer as a function (see `projections`)."""
    part = ProjectionWeights.of(linear) if pack else None
    if part is not None and packable(part.tensors()):
        return _packed_projection([part], pack)
    return _plain_projection(unwrapped(linear))


def projections(linears: list[torch.nn.Module], fuse: bool, pack: Packing | None) -> Projections:
    """Linear layers that read the same input, as one matmul over their weights stacked (when `fuse`), else one
    at a time; a layer that is neither plain nor LoRA over plain runs as its module.

    Packed (`packed_weights`) where every weight is float32 on CPU and the layers are plain or LoRA layers whose
    active adapters' deltas can be folded in. Otherwise through the weights themselves, fused only when all are
    plain `nn.Linear` (merged or no adapter), made one buffer (`_shared_buffer`); there, on CPU, a few rows are
    multiplied as W @ x^T: with the weight as the left ("tall") operand, MKL streams it 1.2-2.3x faster for 2-32
    rows than the x @ W^T that `F.linear` runs, and as fast for one row (the 2-core AMD machine, fp32, 2
    threads); more rows (a prefill) go through `F.linear`.
    """
    parts = [ProjectionWeights.of(linear) for linear in linears] if pack else []
    packs = bool(parts) and all(parts) and packable([t for part in parts for t in part.tensors()])
    layers = [part.linear for part in parts] if packs else [unwrapped(linear) for linear in linears]
    if fuse and all(type(layer) is torch.nn.Linear for layer in layers) and _compatible(layers):
        project = (
            _packed_projection(parts, pack)
            if packs
            else _plain_matmul(_shared_buffer([layer.weight for layer in layers]), _stacked_bias(layers))
        )
        return Split(project, [layer.weight.shape[0] for layer in layers])
    separate = (
        [_packed_projection([part], pack) for part in parts]
        if packs
        else [_plain_projection(layer) for layer in layers]
    )
    return lambda x: tuple(project(x) for project in separate)


def _compatible(linears: list[torch.nn.Linear]) -> bool:
    """Whether the layers can be one matmul: one device, dtype and input width; each with a bias or none."""
    weights = [linear.weight for linear in linears]
    return (
        len({(w.device, w.dtype, w.shape[1]) for w in weights}) == 1
        and len({linear.bias is None for linear in linears}) == 1
    )


def _stacked_bias(linears: list[torch.nn.Linear]) -> torch.Tensor | None:
    return None if linears[0].bias is None else torch.cat([linear.bias.detach() for linear in linears])


@dataclass(frozen=True)
class Split:
    """Projections that read the same input as one matmul, its output split back into theirs."""

    project: Projection
    """The matmul over their weights stacked by rows."""
    sizes: list[int]
    """Each projection's output width, in order."""

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.project(x).split(self.sizes, dim=-1)


@dataclass(frozen=True)
class RowProjection:
    """A projection through `cpu_kernels.row_matmul` on a plain copy of its effective weight."""

    weight: torch.Tensor
    """The weights stacked by rows, adapters folded in (`packed(..., rows=True)`)."""
    bias: torch.Tensor | None
    """Their biases stacked, or None."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return row_matmul(x, self.weight, self.bias)


def _packed_projection(parts: list[ProjectionWeights], pack: Packing) -> Projection:
    """One matmul through the packed copy of the parts' effective weights stacked by rows."""
    weight, bias = packed(parts, pack.rows), _stacked_bias([part.linear for part in parts])
    if pack.rows:
        return RowProjection(weight, bias)
    return lambda x: packed_matmul(x, weight, bias)


def _plain_projection(layer: torch.nn.Module) -> Projection:
    """A layer through its weight (see `projections`), or as its module when it is not a plain `nn.Linear`."""
    return _plain_matmul(_shared_buffer([layer.weight]), layer.bias) if type(layer) is torch.nn.Linear else layer


def _plain_matmul(weight: torch.Tensor, bias: torch.Tensor | None) -> Projection:
    """x @ weight^T + bias; on CPU, few rows as W @ x^T (see `projections`)."""
    if weight.device.type != "cpu":
        return lambda x: F.linear(x, weight, bias)

    def project(x: torch.Tensor) -> torch.Tensor:
        x_M_I = x.reshape(-1, x.shape[-1])
        if len(x_M_I) > _FEW_ROWS:
            return F.linear(x, weight, bias)
        # x^T as a transposed view of contiguous rows: MKL is slow when it gets x^T contiguous.
        x_I_M = x_M_I.contiguous().t()
        out_O_M = torch.mm(weight, x_I_M) if bias is None else torch.addmm(bias[:, None], weight, x_I_M)
        return out_O_M.t().view(*x.shape[:-1], -1)  # a transposed view; the ops that follow accept it

    return project


def _shared_buffer(weights: list[torch.Tensor]) -> torch.Tensor:
    """The weights stacked as rows of one tensor that *is* their storage, starting on a 64-byte boundary.

    When they do not lie back to back there yet, they are copied into a new buffer once and each weight's data
    becomes its block of rows (values unchanged): later in-place writes to a weight (an adapter merged in)
    show in the buffer and the reverse, and later decoders find the buffer without copying. Aligned because
    MKL's results (last bits) and speed depend on it, and weights loaded from safetensors may start anywhere.
    """
    first, columns = weights[0], weights[0].shape[1]
    if _back_to_back(weights) and first.data_ptr() % _ALIGNMENT == 0:
        return torch.as_strided(
            first.detach(), (sum(w.shape[0] for w in weights), columns), (columns, 1), first.storage_offset()
        )
    with torch.no_grad():
        buffer = torch.cat([w.detach() for w in weights])
        start = 0
        for weight in weights:
            weight.data = buffer[start : start + weight.shape[0]]
            start += weight.shape[0]
    return buffer


def _back_to_back(weights: list[torch.Tensor]) -> bool:
    """Whether the weights are contiguous blocks of one storage, in order, each starting where the last ends."""
    storage, offset = weights[0].untyped_storage().data_ptr(), weights[0].storage_offset()
    for weight in weights:
        if (
            not weight.is_contiguous()
            or weight.untyped_storage().data_ptr() != storage
            or weight.storage_offset() != offset
        ):
            return False
        offset += weight.numel()
    return True


def head_projection(lm_head: torch.nn.Module, pack: Packing | None) -> Projection:
    """The LM head as a function: packed on CPU in float32 (oneDNN is 1.9x faster than `F.linear` for 1 row, 3-4x
    for 2-8 rows and 2x for 32), a LoRA adapter on it folded in; otherwise its module."""
    part = ProjectionWeights.of(lm_head) if pack else None
    return _packed_projection([part], pack) if part is not None and packable(part.tensors()) else unwrapped(lm_head)
