"""Incremental decoding over a batch of rows with a KV cache.

Two decoders share one interface (`allocate`, `forward` -> last-position
logits, and `cache.keep_rows` to drop finished rows):

- `FastDecoder` runs Llama-family models (llama, qwen2, qwen3, mistral) with
  `KVCache`, buffers sized once per generation so a step writes one slot
  instead of concatenating, and the LM head applied to the last position
  only. The layer modules are the model's own, so LoRA layers that peft
  injected are used as they are.
- `HFDecoder` falls back to the model's own forward and `DynamicCache` for any
  other causal LM: slower, but general.

Prompts are left-padded so every row shares the slot index; `key_valid_B_S`
masks the padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

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
        self.lm_head = causal_lm.get_output_embeddings()
        config = causal_lm.config
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

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
        device = tokens_B_T.device
        hidden = self.backbone.embed_tokens(tokens_B_T)
        cos, sin = self.backbone.rotary_emb(hidden, positions_B_T)
        query_slot_T = start + torch.arange(steps, device=device)
        slots_S = torch.arange(end, device=device)
        causal_T_S = slots_S[None, :] <= query_slot_T[:, None]
        # A padding query attends to itself only, so no softmax row is empty (an empty row gives NaN).
        self_T_S = slots_S[None, :] == query_slot_T[:, None]
        mask_B_1_T_S = ((cache.key_valid_B_S[:, None, :end] & causal_T_S) | self_T_S)[:, None]
        for index, layer in enumerate(self.backbone.layers):
            attn = layer.self_attn
            normed = layer.input_layernorm(hidden)
            q = attn.q_proj(normed).view(batch, steps, -1, self.head_dim)
            k = attn.k_proj(normed).view(batch, steps, -1, self.head_dim)
            v = attn.v_proj(normed).view(batch, steps, -1, self.head_dim)
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            cache.keys[index][:, :, start:end] = k
            cache.values[index][:, :, start:end] = v.transpose(1, 2)
            out = F.scaled_dot_product_attention(
                q,
                cache.keys[index][:, :, :end],
                cache.values[index][:, :, :end],
                attn_mask=mask_B_1_T_S,
                scale=attn.scaling,
                enable_gqa=True,
            )
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        cache.length = end
        return self.lm_head(self.backbone.norm(hidden[:, -1])).float()


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
