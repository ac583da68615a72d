"""Incremental decoding over a batch of rows with a KV cache.

Two decoders share one interface (`allocate`, `forward` -> last-position
logits, and `cache.keep_rows` to drop finished rows):

- `FastDecoder` runs Llama-family models (llama, qwen2, qwen3, mistral) with
  `KVCache`, buffers sized once per generation so a step writes one slot
  instead of concatenating, and the LM head applied to the last position
  only. The layer modules are the model's own, so LoRA layers that peft
  injected are used as they are (or their base layer, when the adapter is
  merged into it). Projections that read the same input run as one matmul
  (q, k and v; gate and up). On CPU in float32 the projections and the LM
  head run on packed copies of their weights with the active LoRA adapter
  folded in (`packed_weights`), made once per weights' content and kept
  across generations, for the weights' size again in memory (the base
  weights are never written), multiplied by sparring's compiled kernels
  (`cpu_kernels.row_matmul`), which also run the norms and a decode step's
  attention, and where every layer allows (Llama-style: fused q/k/v and
  gate/up, SiLU, no q/k norms) run each layer of a decode step in one call
  (`cpu_kernels.decode_layer`); with `cpu_kernels=False`, or where they
  cannot be built, oneDNN's packed copies and torch's ops (timings of each
  path: benchmarks/README.md). Elsewhere (CUDA, bfloat16, `pack_weights=False`)
  the fused weights are made to lie back to back in one buffer once
  (the `projections` module), values unchanged, so a merged adapter, written into the
  weights in place, lands in the fused weight too; there, on CPU, a few rows
  are projected as W @ x^T. A decode step builds its
  additive mask once, from the new slot only; queries and keys are rotated
  together (with `roll` instead of rotate_half's slices); RMSNorm is one
  `F.rms_norm` call, or the kernels' one pass.
- `HFDecoder` falls back to the model's own forward and `DynamicCache` for any
  other causal LM: slower, but general.

`DecoderPath.of(model, ...)` decides once which of them runs (`make_decoder`).

Every row's prompt ends in the same slot (padding goes before it, or between
a prefix shared by all rows and the rest); `key_valid_B_S` masks the padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ..models.cache_argument import cache_kwargs
from .cpu_kernels import ATTENTION_LIMITS, DecodeLayerWeights, decode_attention, decode_layer
from .cpu_kernels import available as cpu_kernels_available
from .cpu_kernels import rms_norm as kernel_rms_norm
from .packed_weights import packable
from .projections import (
    Packing,
    Projection,
    Projections,
    RowProjection,
    Split,
    head_projection,
    projection,
    projections,
)

FAST_ARCHITECTURES = {"llama", "qwen2", "qwen3", "mistral"}


@dataclass
class KVCache:
    """Per-layer key/value buffers for B rows and up to S slots."""

    keys: list[torch.Tensor]
    """Per layer, [B, H_kv, S, D]."""
    values: list[torch.Tensor]
    """Per layer, [B, H_kv, S, D]."""
    key_valid_B_S: torch.Tensor
    """True where a slot holds a real (non-padding) token."""
    length: int = 0
    """Slots filled so far (the same for every row)."""

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.key_valid_B_S = self.key_valid_B_S.index_select(0, rows)


@dataclass
class HFCache:
    """The model's own DynamicCache plus the padding mask."""

    key_valid_B_S: torch.Tensor
    """True where a slot holds a real (non-padding) token."""
    length: int = 0
    """Slots filled so far."""
    cache: DynamicCache = field(default_factory=DynamicCache)
    """Keys and values as the model stores them."""

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.key_valid_B_S = self.key_valid_B_S.index_select(0, rows)


def _mark_valid(cache, valid_B_T: torch.Tensor) -> tuple[int, int]:
    start, end = cache.length, cache.length + valid_B_T.shape[1]
    cache.key_valid_B_S[:, start:end] = valid_B_T
    return start, end


class FastDecoder:
    """Prefill and step a Llama-family model over a preallocated `KVCache`."""

    def __init__(
        self,
        causal_lm: torch.nn.Module,
        fuse_projections: bool = True,
        pack_weights: bool = True,
        cpu_kernels: bool = True,
        whole_layers: bool = True,
    ):
        """`fuse_projections=False` runs every projection alone (the reference the fused path is tested against);
        `pack_weights=False` never makes packed copies (saves the memory they take); `cpu_kernels=False` runs
        torch's ops and oneDNN's packed copies instead of sparring's compiled kernels (`cpu_kernels`, used only in
        float32 on a CPU where they run); `whole_layers=False` runs decode steps op by op even where the kernels
        could run each layer in one call (`cpu_kernels.decode_layer`; the reference it is tested against)."""
        self.causal_lm = causal_lm
        self.backbone = causal_lm.get_decoder()
        config = causal_lm.config
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kernels = cpu_kernels and packable([causal_lm.get_input_embeddings().weight]) and cpu_kernels_available()
        group = config.num_attention_heads // self.kv_heads
        self.kernel_attention = (
            self.kernels and group <= ATTENTION_LIMITS["group"] and self.head_dim <= ATTENTION_LIMITS["head_dim"]
        )
        self.packing = Packing(rows=self.kernels) if pack_weights else None
        self.lm_head = head_projection(causal_lm.get_output_embeddings(), self.packing)
        self.layers = [_LayerParts.of(layer, fuse_projections, self.packing) for layer in self.backbone.layers]
        kernel_layers = (
            [_kernel_layer(parts, config, self.head_dim) for parts in self.layers]
            if self.kernel_attention and whole_layers
            else []
        )
        # Decode steps run each layer in one `cpu_kernels.decode_layer` call where every layer can; else op by op.
        self.kernel_layers = kernel_layers if kernel_layers and all(kernel_layers) else None

    @staticmethod
    def supports(causal_lm: torch.nn.Module) -> bool:
        return getattr(causal_lm.config, "model_type", None) in FAST_ARCHITECTURES

    def allocate(self, batch: int, max_len: int) -> KVCache:
        weight = self.backbone.embed_tokens.weight

        def buffers():
            shape = (batch, self.kv_heads, max_len, self.head_dim)
            return [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(self.num_layers)]

        return KVCache(buffers(), buffers(), torch.zeros(batch, max_len, dtype=torch.bool, device=weight.device))

    def forward(
        self, tokens_B_T: torch.Tensor, positions_B_T: torch.Tensor, valid_B_T: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        """Write tokens_B_T into the next T slots; return float32 logits of the last position [B, V]."""
        batch, steps = tokens_B_T.shape
        start, end = _mark_valid(cache, valid_B_T)
        hidden = self.backbone.embed_tokens(tokens_B_T)
        if steps == 1 and self.kernel_layers is not None:
            return self._kernel_step(hidden.view(batch, -1), positions_B_T, cache, start)
        cos_B_T_1_D, sin_B_T_1_D = (t.unsqueeze(2) for t in self.backbone.rotary_emb(hidden, positions_B_T))
        # rotate_half(x) * sin == x.roll(D / 2) * signed_sin, one op instead of four.
        half = self.head_dim // 2
        signed_sin_B_T_1_D = torch.cat((-sin_B_T_1_D[..., :half], sin_B_T_1_D[..., half:]), dim=-1)
        kernel_attention = self.kernel_attention and steps == 1
        bias_B_1_T_S = None if kernel_attention else _attention_bias(cache.key_valid_B_S, start, end, hidden.dtype)
        for parts, keys, values in zip(self.layers, cache.keys, cache.values, strict=True):
            normed = self._rms_norm(parts.input_norm, hidden)
            q, k, v = (t.view(batch, steps, -1, self.head_dim) for t in parts.qkv_proj(normed))
            if parts.q_norm is not None:
                q, k = self._rms_norm(parts.q_norm, q), self._rms_norm(parts.k_norm, k)
            # Rotate queries and keys in one go: [B, T, H + H_kv, D].
            query_heads = q.shape[2]
            q_and_k = torch.cat((q, k), dim=2)
            q_and_k = q_and_k * cos_B_T_1_D + q_and_k.roll(half, dims=-1) * signed_sin_B_T_1_D
            keys[:, :, start:end] = q_and_k[:, :, query_heads:].transpose(1, 2)
            values[:, :, start:end] = v.transpose(1, 2)
            if kernel_attention:
                attended = decode_attention(
                    q_and_k[:, 0, :query_heads], keys, values, cache.key_valid_B_S, end, parts.scaling
                ).view(batch, 1, -1)
            else:
                attended = (
                    F.scaled_dot_product_attention(
                        q_and_k[:, :, :query_heads].transpose(1, 2),
                        keys[:, :, :end],
                        values[:, :, :end],
                        attn_mask=bias_B_1_T_S,
                        scale=parts.scaling,
                        enable_gqa=True,
                    )
                    .transpose(1, 2)
                    .reshape(batch, steps, -1)
                )
            hidden = hidden + parts.o_proj(attended)
            normed = self._rms_norm(parts.post_attention_norm, hidden)
            gate, up = parts.gate_up_proj(normed)
            hidden = hidden + parts.down_proj(parts.act_fn(gate).mul_(up))
        cache.length = end
        return self.lm_head(self._rms_norm(self.backbone.norm, hidden[:, -1])).float()

    def _kernel_step(
        self, hidden_B_E: torch.Tensor, positions_B_1: torch.Tensor, cache: KVCache, slot: int
    ) -> torch.Tensor:
        """One decode step, every layer in one `cpu_kernels.decode_layer` call."""
        cos_B_1_D, sin_B_1_D = self.backbone.rotary_emb(hidden_B_E[:, None], positions_B_1)
        cos_B_D, sin_B_D = cos_B_1_D[:, 0].contiguous(), sin_B_1_D[:, 0].contiguous()
        scratch = hidden_B_E.new_empty(self.kernel_layers[0].scratch_floats(len(hidden_B_E)))
        for weights, keys, values in zip(self.kernel_layers, cache.keys, cache.values, strict=True):
            decode_layer(hidden_B_E, weights, cos_B_D, sin_B_D, keys, values, cache.key_valid_B_S, slot, scratch)
        cache.length = slot + 1
        return self.lm_head(self._rms_norm(self.backbone.norm, hidden_B_E)).float()

    def _rms_norm(self, norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return kernel_rms_norm(hidden, norm.weight, norm.variance_epsilon) if self.kernels else _rms_norm(norm, hidden)


@dataclass
class _LayerParts:
    """The modules one decoder layer runs, looked up once per generation (merged LoRA layers unwrapped)."""

    input_norm: torch.nn.Module
    qkv_proj: Projections
    o_proj: Projection
    q_norm: torch.nn.Module | None
    k_norm: torch.nn.Module | None
    scaling: float
    post_attention_norm: torch.nn.Module
    gate_up_proj: Projections
    down_proj: Projection
    act_fn: torch.nn.Module

    @classmethod
    def of(cls, layer: torch.nn.Module, fuse: bool, pack: Packing | None) -> _LayerParts:
        attn, mlp = layer.self_attn, layer.mlp
        return cls(
            input_norm=layer.input_layernorm,
            qkv_proj=projections([attn.q_proj, attn.k_proj, attn.v_proj], fuse, pack),
            o_proj=projection(attn.o_proj, pack),
            q_norm=getattr(attn, "q_norm", None),
            k_norm=getattr(attn, "k_norm", None),
            scaling=attn.scaling,
            post_attention_norm=layer.post_attention_layernorm,
            gate_up_proj=projections([mlp.gate_proj, mlp.up_proj], fuse, pack),
            down_proj=projection(mlp.down_proj, pack),
            act_fn=mlp.act_fn,
        )


def _kernel_layer(parts: _LayerParts, config, head_dim: int) -> DecodeLayerWeights | None:
    """What `cpu_kernels.decode_layer` needs to run the layer in one call, or None where it cannot: q/k/v and gate/up
    each one row-kernel matmul, a SiLU MLP, no q/k norms, both norms with one epsilon, an even head size."""
    qkv, gate_up, o, down = parts.qkv_proj, parts.gate_up_proj, parts.o_proj, parts.down_proj
    fused = all(isinstance(p, Split) and isinstance(p.project, RowProjection) for p in (qkv, gate_up))
    norms = (parts.input_norm, parts.post_attention_norm)
    if (
        not fused
        or not all(isinstance(p, RowProjection) for p in (o, down))
        or parts.q_norm is not None
        or getattr(config, "hidden_act", None) != "silu"
    ):
        return None
    if head_dim % 2 or norms[0].variance_epsilon != norms[1].variance_epsilon:
        return None
    return DecodeLayerWeights(
        input_norm_E=norms[0].weight.detach().contiguous(), post_norm_E=norms[1].weight.detach().contiguous(),
        eps=norms[0].variance_epsilon,
        qkv_weight=qkv.project.weight, qkv_bias=qkv.project.bias, o_weight=o.weight, o_bias=o.bias,
        gate_up_weight=gate_up.project.weight, gate_up_bias=gate_up.project.bias,
        down_weight=down.weight, down_bias=down.bias,
        heads=config.num_attention_heads, kv_heads=config.num_key_value_heads, head_dim=head_dim, scale=parts.scaling,
    )  # fmt: skip


def _rms_norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op in float32 (bit-identical there); the module itself otherwise."""
    if hidden.dtype != torch.float32:
        return norm(hidden)
    return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)


def _attention_bias(key_valid_B_S: torch.Tensor, start: int, end: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [B, 1, T, S] mask (0 or -inf) for queries in slots start..end-1: real earlier keys, plus the query's
    own slot.

    A padding query attends to itself only, so no softmax row is empty (an empty row gives NaN). Built once
    per forward as floats, so attention does not convert a boolean mask in every layer.
    """
    if end - start == 1:  # one decode step: every earlier slot is causal, so only the own slot is special
        allowed_B_1_T_S = key_valid_B_S[:, None, None, :end].clone()
        allowed_B_1_T_S[..., start] = True
    else:
        device = key_valid_B_S.device
        query_slot_T = torch.arange(start, end, device=device)
        slots_S = torch.arange(end, device=device)
        causal_T_S = slots_S[None, :] <= query_slot_T[:, None]
        self_T_S = slots_S[None, :] == query_slot_T[:, None]
        allowed_B_1_T_S = ((key_valid_B_S[:, None, :end] & causal_T_S) | self_T_S)[:, None]
    return torch.zeros(allowed_B_1_T_S.shape, dtype=dtype, device=key_valid_B_S.device).masked_fill_(
        ~allowed_B_1_T_S, float("-inf")
    )


class HFDecoder:
    """Any causal LM through its own forward and DynamicCache."""

    def __init__(self, causal_lm: torch.nn.Module):
        self.causal_lm = causal_lm

    def allocate(self, batch: int, max_len: int) -> HFCache:
        device = self.causal_lm.get_input_embeddings().weight.device
        return HFCache(torch.zeros(batch, max_len, dtype=torch.bool, device=device))

    def forward(
        self, tokens_B_T: torch.Tensor, positions_B_T: torch.Tensor, valid_B_T: torch.Tensor, cache: HFCache
    ) -> torch.Tensor:
        _, end = _mark_valid(cache, valid_B_T)
        out = self.causal_lm(
            input_ids=tokens_B_T,
            position_ids=positions_B_T,
            attention_mask=cache.key_valid_B_S[:, :end].long(),
            **cache_kwargs(self.causal_lm, cache.cache),
            use_cache=True,
            logits_to_keep=1,
        )
        cache.length = end
        return out.logits[:, -1].float()


@dataclass(frozen=True)
class DecoderPath:
    """Which decoder samples a model, decided once (`of`; `build` makes it): `FastDecoder` (`fast`, with its
    `pack_weights` and `cpu_kernels`) or `HFDecoder`. `folds_adapter`: the fast decoder packs float32 CPU weights and
    folds the adapter into its copies, so inference never merges it into the base weights."""

    fast: bool
    pack_weights: bool
    cpu_kernels: bool
    folds_adapter: bool

    @classmethod
    def of(
        cls, causal_lm: torch.nn.Module, prefer_fast: bool = True, pack_weights: bool = True, cpu_kernels: bool = True
    ) -> DecoderPath:
        fast = prefer_fast and FastDecoder.supports(causal_lm)
        folds = fast and pack_weights and packable([causal_lm.get_input_embeddings().weight])
        return cls(fast, pack_weights, cpu_kernels, folds)

    def build(self, causal_lm: torch.nn.Module) -> FastDecoder | HFDecoder:
        if self.fast:
            return FastDecoder(causal_lm, pack_weights=self.pack_weights, cpu_kernels=self.cpu_kernels)
        return HFDecoder(causal_lm)


def make_decoder(
    causal_lm: torch.nn.Module, prefer_fast: bool = True, pack_weights: bool = True, cpu_kernels: bool = True
) -> FastDecoder | HFDecoder:
    return DecoderPath.of(causal_lm, prefer_fast, pack_weights, cpu_kernels).build(causal_lm)
