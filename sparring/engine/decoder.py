"""Incremental decoding over a batch of rows with a KV cache.

Two decoders share one interface (`allocate`, `forward` -> last-position
logits, and `cache.keep_rows` to drop finished rows):

- `FastDecoder` runs Llama-family models (llama, qwen2, qwen3, mistral) with
  `KVCache`, buffers sized once per generation so a step writes one slot
  instead of concatenating, and the LM head applied to the last position
  only. The layer modules are the model's own, so LoRA layers that peft
  injected are used as they are (or their base layer, when the adapter is
  merged into it). A decode step builds its mask from the new slot only,
  rotates queries and keys together and runs RMSNorm as one fused op.
- `HFDecoder` falls back to the model's own forward and `DynamicCache` for any
  other causal LM: slower, but general.

Prompts are left-padded so every row shares the slot index; `key_valid_B_S`
masks the padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import rotate_half

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

    def __init__(self, causal_lm: torch.nn.Module):
        self.causal_lm = causal_lm
        self.backbone = causal_lm.get_decoder()
        self.lm_head = _unwrapped(causal_lm.get_output_embeddings())
        config = causal_lm.config
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.layers = [_LayerParts.of(layer) for layer in self.backbone.layers]

    @staticmethod
    def supports(causal_lm: torch.nn.Module) -> bool:
        return getattr(causal_lm.config, "model_type", None) in FAST_ARCHITECTURES

    def allocate(self, batch: int, max_len: int) -> KVCache:
        weight = self.backbone.embed_tokens.weight

        def buffers():
            shape = (batch, self.kv_heads, max_len, self.head_dim)
            return [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(self.num_layers)]

        return KVCache(buffers(), buffers(), torch.zeros(batch, max_len, dtype=torch.bool, device=weight.device))

    def forward(self, tokens_B_T: torch.Tensor, positions_B_T: torch.Tensor, valid_B_T: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Write tokens_B_T into the next T slots; return float32 logits of the last position [B, V]."""
        batch, steps = tokens_B_T.shape
        start, end = _mark_valid(cache, valid_B_T)
        hidden = self.backbone.embed_tokens(tokens_B_T)
        cos_B_T_1_D, sin_B_T_1_D = (t.unsqueeze(2) for t in self.backbone.rotary_emb(hidden, positions_B_T))
        mask_B_1_T_S = _attention_mask(cache.key_valid_B_S, start, end)
        for parts, keys, values in zip(self.layers, cache.keys, cache.values):
            normed = _rms_norm(parts.input_norm, hidden)
            q = parts.q_proj(normed).view(batch, steps, -1, self.head_dim)
            k = parts.k_proj(normed).view(batch, steps, -1, self.head_dim)
            v = parts.v_proj(normed).view(batch, steps, -1, self.head_dim)
            if parts.q_norm is not None:
                q, k = _rms_norm(parts.q_norm, q), _rms_norm(parts.k_norm, k)
            # Rotate queries and keys in one go: [B, T, H + H_kv, D].
            query_heads = q.shape[2]
            q_and_k = torch.cat((q, k), dim=2)
            q_and_k = q_and_k * cos_B_T_1_D + rotate_half(q_and_k) * sin_B_T_1_D
            keys[:, :, start:end] = q_and_k[:, :, query_heads:].transpose(1, 2)
            values[:, :, start:end] = v.transpose(1, 2)
            out = F.scaled_dot_product_attention(
                q_and_k[:, :, :query_heads].transpose(1, 2),
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=mask_B_1_T_S,
                scale=parts.scaling,
                enable_gqa=True,
            )
            hidden = hidden + parts.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))
            normed = _rms_norm(parts.post_attention_norm, hidden)
            hidden = hidden + parts.down_proj(parts.act_fn(parts.gate_proj(normed)) * parts.up_proj(normed))
        cache.length = end
        return self.lm_head(_rms_norm(self.backbone.norm, hidden[:, -1])).float()


@dataclass
class _LayerParts:
    """The modules one decoder layer runs, looked up once per generation (merged LoRA layers unwrapped)."""

    input_norm: torch.nn.Module
    q_proj: torch.nn.Module
    k_proj: torch.nn.Module
    v_proj: torch.nn.Module
    o_proj: torch.nn.Module
    q_norm: torch.nn.Module | None
    k_norm: torch.nn.Module | None
    scaling: float
    post_attention_norm: torch.nn.Module
    gate_proj: torch.nn.Module
    up_proj: torch.nn.Module
    down_proj: torch.nn.Module
    act_fn: torch.nn.Module

    @classmethod
    def of(cls, layer: torch.nn.Module) -> _LayerParts:
        attn, mlp = layer.self_attn, layer.mlp
        return cls(
            input_norm=layer.input_layernorm,
            q_proj=_unwrapped(attn.q_proj),
            k_proj=_unwrapped(attn.k_proj),
            v_proj=_unwrapped(attn.v_proj),
            o_proj=_unwrapped(attn.o_proj),
            q_norm=getattr(attn, "q_norm", None),
            k_norm=getattr(attn, "k_norm", None),
            scaling=attn.scaling,
            post_attention_norm=layer.post_attention_layernorm,
            gate_proj=_unwrapped(mlp.gate_proj),
            up_proj=_unwrapped(mlp.up_proj),
            down_proj=_unwrapped(mlp.down_proj),
            act_fn=mlp.act_fn,
        )


def _unwrapped(linear: torch.nn.Module) -> torch.nn.Module:
    """The plain layer under a peft LoRA layer whose forward would only call it (adapters merged, or disabled), else the layer."""
    if isinstance(linear, BaseTunerLayer) and linear.merged != linear.disable_adapters:
        return linear.get_base_layer()
    return linear


def _rms_norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op in float32 (bit-identical there); the module itself otherwise."""
    if hidden.dtype != torch.float32:
        return norm(hidden)
    return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)


def _attention_mask(key_valid_B_S: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """[B, 1, T, S] mask for queries in slots start..end-1: real earlier keys, plus the query's own slot.

    A padding query attends to itself only, so no softmax row is empty (an empty row gives NaN).
    """
    if end - start == 1:  # one decode step: every earlier slot is causal, so only the own slot is special
        mask_B_S = key_valid_B_S[:, :end].clone()
        mask_B_S[:, start] = True
        return mask_B_S[:, None, None, :]
    device = key_valid_B_S.device
    query_slot_T = torch.arange(start, end, device=device)
    slots_S = torch.arange(end, device=device)
    causal_T_S = slots_S[None, :] <= query_slot_T[:, None]
    self_T_S = slots_S[None, :] == query_slot_T[:, None]
    return ((key_valid_B_S[:, None, :end] & causal_T_S) | self_T_S)[:, None]


class HFDecoder:
    """Any causal LM through its own forward and DynamicCache."""

    def __init__(self, causal_lm: torch.nn.Module):
        self.causal_lm = causal_lm

    def allocate(self, batch: int, max_len: int) -> HFCache:
        device = self.causal_lm.get_input_embeddings().weight.device
        return HFCache(torch.zeros(batch, max_len, dtype=torch.bool, device=device))

    def forward(self, tokens_B_T: torch.Tensor, positions_B_T: torch.Tensor, valid_B_T: torch.Tensor, cache: HFCache) -> torch.Tensor:
        _, end = _mark_valid(cache, valid_B_T)
        out = self.causal_lm(
            input_ids=tokens_B_T,
            position_ids=positions_B_T,
            attention_mask=cache.key_valid_B_S[:, :end].long(),
            past_key_values=cache.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache.length = end
        return out.logits[:, -1].float()


def make_decoder(causal_lm: torch.nn.Module, prefer_fast: bool = True) -> FastDecoder | HFDecoder:
    if prefer_fast and FastDecoder.supports(causal_lm):
        return FastDecoder(causal_lm)
    return HFDecoder(causal_lm)
