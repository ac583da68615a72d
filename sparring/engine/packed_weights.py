"""Packed copies of float32 CPU weights, with LoRA adapters folded in, for the sampler and the learner.

On the 2-core AMD machine (MKL, 2 threads) a matmul against a weight that
oneDNN has reordered into its blocked layout once runs much faster than
`F.linear` on the plain weight: 2x for the 8 rows of a decode step, 1.5x for
32, 1.2x for a prefill's hundreds of rows. The sampler's own kernel
(`cpu_kernels.row_matmul`) is faster still for its few rows, on a plain
row-major copy.

- `ProjectionWeights` is what one projection multiplies by: a plain weight
  plus the deltas of the unmerged LoRA adapters active on it. The sampler
  packs W + BA directly (`packed`: oneDNN's layout, or with `rows` plain rows
  for `cpu_kernels.row_matmul`), so sampling an adapter never writes the base weights (no
  merge, no copy of W set aside, nothing to undo).
- `packed` keeps a packed tensor per group of weights and set of adapters
  folded in (the last three sets sampled: the base model, a policy and its
  snapshot opponent sampled in turn pack nothing again), and makes it again
  only when a tensor it was made from has changed: a tensor's `_version`
  counts its in-place writes (an optimizer step on the LoRA matrices, a
  merge), and its storage changes with a new `.data`, so a change is always
  seen. Copies live as long as their weights.

- `packed_frozen` keeps a packed copy of a frozen weight alone, or of its
  transpose, for the learner (`lora_matmul`, `target_logprobs`): the forward
  multiplies by W, the backward's input gradient by W^T. A GRPO batch's
  forward+backward ran 1.3-1.4x faster than through `F.linear` (8 and 32
  completions of SmolLM2-135M, alternating in one process), for twice the
  frozen weights' size in memory.

The price is memory, the weights' size again per set of adapters kept (up to
three), and twice again for the learner; `EngineConfig.pack_cpu_weights`
turns both off.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from peft.tuners.lora import LoraLayer
from peft.tuners.tuners_utils import BaseTunerLayer


@dataclass(frozen=True)
class ProjectionWeights:
    """The weight one projection multiplies by: a plain `nn.Linear`'s, plus active unmerged LoRA adapters' deltas."""

    linear: torch.nn.Linear
    """The plain layer whose weight (and bias) the projection starts from."""
    lora: LoraLayer | None = None
    """The peft layer around `linear`, when adapters add to it."""
    adapters: tuple[str, ...] = ()
    """Names of the adapters whose delta (scaling x B @ A) is added to the weight."""

    @classmethod
    def of(cls, layer: torch.nn.Module) -> ProjectionWeights | None:
        """What `layer`'s forward multiplies by, or None when that is not a weight plus LoRA deltas (DoRA, LoRA
        biases, a merged adapter that peft would unmerge, a layer that is not linear)."""
        if type(layer) is torch.nn.Linear:
            return cls(layer)
        if not isinstance(layer, BaseTunerLayer) or type(layer.get_base_layer()) is not torch.nn.Linear:
            return None
        base = layer.get_base_layer()
        if layer.merged:  # the base weight holds the merged adapters; peft unmerges them first when adapters are off
            return None if layer.disable_adapters else cls(base)
        if layer.disable_adapters:
            return cls(base)
        if not isinstance(layer, LoraLayer):
            return None
        adapters = tuple(name for name in layer.active_adapters if name in layer.lora_A)
        if any(layer.use_dora.get(name) or layer.lora_B[name].bias is not None for name in adapters):
            return None
        return cls(base, layer, adapters) if adapters else cls(base)

    @property
    def weight(self) -> torch.Tensor:
        return self.linear.weight

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the effective weight is computed from."""
        deltas = [t for name in self.adapters for t in (self.lora.lora_A[name].weight, self.lora.lora_B[name].weight)]
        return [self.linear.weight, *deltas]

    def write_effective(self, out: torch.Tensor) -> None:
        """Write W plus every adapter's delta (scaling x B @ A, what peft merges) into `out`, one fused multiply-add
        per adapter (peft's merge makes the delta, scales it and adds it: three passes over W's size); W is left
        alone."""
        summand = self.linear.weight.detach()
        if not self.adapters:
            out.copy_(summand)
        for name in self.adapters:
            torch.addmm(
                summand,
                self.lora.lora_B[name].weight.detach(),
                self.lora.lora_A[name].weight.detach(),
                alpha=self.lora.scaling[name],
                out=out,
            )
            summand = out


def packable(weights: list[torch.Tensor]) -> bool:
    """float32 CPU weights, with oneDNN in this torch build."""
    return torch.backends.mkldnn.is_available() and all(
        w.device.type == "cpu" and w.dtype == torch.float32 for w in weights
    )


def packed_matmul(x: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W^T + bias for a weight packed by `packed` (any leading dimensions on x)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, bias, "none", [], "")


@dataclass
class _PackedCopy:
    sources: tuple[weakref.ref, ...]
    """The tensors it was made from, weakly: a dead one drops the copy."""
    versions: tuple[float, ...]
    """Their `_state` (and the adapters' scalings) when packed; any change means packing again."""
    tensor: torch.Tensor
    """The oneDNN-packed weights."""

    def made_from(self, sources: list[torch.Tensor], versions: tuple) -> bool:
        """Whether it was packed from exactly these tensors in this state (see `_state`)."""
        return self.versions == versions and all(ref() is t for ref, t in zip(self.sources, sources, strict=True))


def _state(tensors: list[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """What a packed copy of the tensors depends on: each one's in-place writes (`_version`) and its storage (a new
    `.data` at the same version)."""
    return tuple((t._version, t.data_ptr()) for t in tensors)


# (plain rows or oneDNN's layout, ids of the plain weights) -> their packed copies, least recently used first: one per
# set of adapters folded in (ids of every source tensor), at most _COPIES_PER_WEIGHTS of them.
_PACKED: dict[tuple[int, ...], OrderedDict[tuple[int, ...], _PackedCopy]] = {}
# The base model, a policy and its snapshot opponent, sampled in turn, each keep their copy.
_COPIES_PER_WEIGHTS = 3


def packed(projections: list[ProjectionWeights], rows: bool = False) -> torch.Tensor:
    """The projections' effective weights stacked by rows, as one oneDNN-packed tensor (for `packed_matmul`), or with
    `rows` as one plain contiguous tensor (for `cpu_kernels.row_matmul`: a lone weight without adapters is itself).

    Made once per content of the tensors they come from (~0.2 s for all of SmolLM2-135M's) and reused by later
    sampling batches; the copies of the last three adapter sets sampled (no adapter counts as one) are kept. A plain
    copy made again is written over its old values (a new one would page-fault the model's size in every step).
    """
    if rows and len(projections) == 1 and not projections[0].adapters:
        return projections[0].weight.detach().contiguous()
    sources = [t for p in projections for t in p.tensors()]
    versions = _state(sources) + tuple(p.lora.scaling[name] for p in projections for name in p.adapters)
    key = tuple(id(t) for t in sources)
    copies = _PACKED.setdefault((rows, *(id(p.weight) for p in projections)), OrderedDict())
    copy = copies.get(key)
    if copy is None or not copy.made_from(sources, versions):
        with torch.no_grad():
            if rows:
                old = copy.tensor if copy is not None else None
                tensor = _effective_stacked(
                    projections, lambda shape: old if old is not None and old.shape == shape else None
                )
            else:
                tensor = torch.ops.mkldnn._reorder_linear_weight(_effective_stacked(projections, _scratch))
        forget = lambda _: copies.pop(key, None)  # noqa: E731
        copy = copies[key] = _PackedCopy(tuple(weakref.ref(t, forget) for t in sources), versions, tensor)
    copies.move_to_end(key)
    while len(copies) > _COPIES_PER_WEIGHTS:
        copies.popitem(last=False)
    return copy.tensor


# (id of a frozen weight, transposed) -> its packed copy, for the learner; apart from the sampler's copies, so
# neither evicts the other.
_FROZEN: dict[tuple[int, bool], _PackedCopy] = {}


def packed_frozen(weight: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """`weight` (or its transpose) as a oneDNN-packed tensor for `packed_matmul`, made once per content of the weight
    (a merge written into it, or new `.data`, packs again) and dropped with it."""
    key, versions = (id(weight), transposed), _state([weight])
    copy = _FROZEN.get(key)
    if copy is None or not copy.made_from([weight], versions):
        with torch.no_grad():
            tensor = torch.ops.mkldnn._reorder_linear_weight(
                (weight.t() if transposed else weight).detach().contiguous()
            )
        copy = _FROZEN[key] = _PackedCopy((weakref.ref(weight, lambda _: _FROZEN.pop(key, None)),), versions, tensor)
    return copy.tensor


def _effective_stacked(
    projections: list[ProjectionWeights], buffer: Callable[[torch.Size], torch.Tensor | None]
) -> torch.Tensor:
    """The projections' effective weights stacked by rows, written into `buffer(shape)` (None: a new tensor), or, for
    a lone projection without adapters, its weight itself."""
    if len(projections) == 1 and not projections[0].adapters:
        return projections[0].weight.detach()
    first = projections[0].weight
    rows = [p.weight.shape[0] for p in projections]
    shape = torch.Size((sum(rows), first.shape[1]))
    out = buffer(shape)
    if out is None:
        out = torch.empty(shape, dtype=first.dtype, device=first.device)
    for projection, block in zip(projections, out.split(rows), strict=True):
        projection.write_effective(block)
    return out


# Per thread (each engine samples on a thread of its own): the buffer `_effective_stacked` writes oneDNN's source
# into, as large as the largest group packed so far (float32 CPU weights only: see `packable`).
_SCRATCH = threading.local()


def _scratch(shape: torch.Size) -> torch.Tensor:
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.numel() < shape.numel():
        buffer = _SCRATCH.buffer = torch.empty(shape.numel())
    return buffer[: shape.numel()].view(shape)
