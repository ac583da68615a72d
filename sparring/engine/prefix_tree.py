"""How the learner lays datums out as prefix trees: every distinct prefix computed once.

A multi-turn episode trains as one merged sequence, and the episodes of a
step begin alike at many depths: the same system prompt, the same first
guess, the same referee reply, the same second guess... Running each datum
whole (`batch_plan`, the fallback) computes every token the datums have in
common again for each of them. A `TreeBatch` is a
trie of datums laid out as one sequence of its nodes (a node per distinct
prefix, each after its parent), with the position of a node its depth and an
attention mask that lets a node see exactly its ancestors and itself; one
forward+backward over it equals one over each datum alone, up to float
rounding, and computes each node once. Every datum position maps to the
node of its prefix, so positions of several datums that predict the same
token from the same prefix also share the LM head (`_position_logprobs`).

`plan_tree_batches` fills batches in lexicographic order of the datums:
sorted, a datum adds to the trie of those before it exactly its tokens past
its longest common prefix with its predecessor, so a batch's node count is
known while filling it and kept within the budget (a datum longer than the
budget goes alone).

`TreeAttention` is how a trie attends: dense attention over all its nodes
would cost nodes^2 per layer, nearly all of it masked out, so the nodes run
in chunks of `_CHUNK` consecutive nodes, each against only the nodes one of
its nodes can see (its own and the few ancestors before it: in node order,
a root path or two), about nodes x (chunk + depth). It is a transformers
attention function (`tree_attention_forward`, registered as
"sparring_prefix_tree"), so the model's own layers, LoRA included, run the
trie; only models whose every layer attends to its whole past through plain
softmax attention run as tries (`runs_as_trees`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

_CHUNK = 128
"""Nodes per query chunk: small enough that a chunk sees few nodes besides its own, large enough for big matmuls."""
TREE_ARCHITECTURES = {"llama", "qwen2", "qwen3"}
"""Model types whose attention is plain softmax over keys rotated by position (no sinks, soft-capping or windows)."""


@dataclass
class TreeAttention:
    """A trie's attention as chunks of consecutive nodes, each against only the nodes some node of it can see."""

    keys_Q_K: torch.Tensor
    """Per chunk, the node read into each key slot (slots past the chunk's own count repeat node 0, masked out)."""
    sees_Q_C_K: torch.Tensor
    """Per chunk, whether query row c may attend key slot k (rows past the last node see slot 0 only)."""

    def to(self, device: torch.device) -> TreeAttention:
        return TreeAttention(self.keys_Q_K.to(device), self.sees_Q_C_K.to(device))


@dataclass
class TreeBatch:
    """Datums run through the backbone together as one trie."""

    indices: list[int]
    """Positions of the datums in the learner's input list, in the order `nodes_of` follows."""
    tokens_N: torch.Tensor
    """The token of each trie node, every node after its parent."""
    depths_N: torch.Tensor
    """Each node's depth from 0: its position id in the datums that contain it."""
    nodes_of: list[torch.Tensor]
    """For each datum (in `indices` order), the node of each of its positions."""
    attention: TreeAttention | None
    """Which nodes each node attends to; None for a lone datum (plain causal attention)."""


def plan_tree_batches(tokens: list[torch.Tensor], node_budget: int) -> list[TreeBatch]:
    """Tree batches covering every datum once, each of at most `node_budget` nodes (a longer datum alone)."""
    lists = [t.tolist() for t in tokens]
    order = sorted(range(len(lists)), key=lambda i: lists[i])
    groups: list[list[tuple[int, int]]] = []  # per batch: (datum, common prefix with the previous datum of the batch)
    nodes = 0
    for previous, index in zip([None, *order], order, strict=False):
        shared = 0 if previous is None else common_prefix_length([lists[previous], lists[index]])
        if groups and nodes + len(lists[index]) - shared <= node_budget:
            groups[-1].append((index, shared))
            nodes += len(lists[index]) - shared
        else:
            groups.append([(index, 0)])
            nodes = len(lists[index])
    return [_tree_batch(group, lists) for group in groups]


def _tree_batch(group: list[tuple[int, int]], lists: list[list[int]]) -> TreeBatch:
    size = sum(len(lists[index]) - shared for index, shared in group)
    tokens_N = torch.empty(size, dtype=torch.long)
    depths_N = torch.empty(size, dtype=torch.long)
    sees_N_N = torch.zeros(size, size, dtype=torch.bool) if len(group) > 1 else None  # j is i or an ancestor of i
    longest = max(len(lists[index]) for index, _ in group)
    lower_L_L = torch.ones(longest, longest, dtype=torch.bool).tril()  # position p sees positions 0..p
    nodes_of: list[torch.Tensor] = []
    path: list[int] = []  # the previous datum's nodes
    created = 0
    for index, shared in group:
        datum = lists[index]
        path = path[:shared] + list(range(created, created + len(datum) - shared))
        created += len(datum) - shared
        path_L = torch.tensor(path, dtype=torch.long)
        if len(datum) > shared and sees_N_N is not None:
            sees_N_N[path_L[shared:, None], path_L[None, :]] = lower_L_L[shared : len(datum), : len(datum)]
        tokens_N[path_L[shared:]] = torch.tensor(datum[shared:], dtype=torch.long)
        depths_N[path_L[shared:]] = torch.arange(shared, len(datum))
        nodes_of.append(path_L)
    attention = None if sees_N_N is None else _tree_attention(sees_N_N, _CHUNK)
    return TreeBatch([index for index, _ in group], tokens_N, depths_N, nodes_of, attention)


def common_prefix_length(sequences: list[list[int]]) -> int:
    """How many leading tokens all the sequences have in common."""
    first, length = sequences[0], min(len(s) for s in sequences)
    for sequence in sequences[1:]:
        matched = 0
        while matched < length and sequence[matched] == first[matched]:
            matched += 1
        length = matched
    return length


def _tree_attention(sees_N_N: torch.Tensor, chunk: int) -> TreeAttention:
    nodes = len(sees_N_N)
    starts = range(0, nodes, chunk)
    keys = [sees_N_N[start : start + chunk].any(0).nonzero().squeeze(-1) for start in starts]
    width = max(len(k) for k in keys)
    keys_Q_K = torch.zeros(len(keys), width, dtype=torch.long)
    sees_Q_C_K = torch.zeros(len(keys), chunk, width, dtype=torch.bool)
    for q, (start, keys_K) in enumerate(zip(starts, keys, strict=True)):
        rows = sees_N_N[start : start + chunk]
        keys_Q_K[q, : len(keys_K)] = keys_K
        sees_Q_C_K[q, : len(rows), : len(keys_K)] = rows[:, keys_K]
        sees_Q_C_K[q, len(rows) :, 0] = True  # padding rows attend to something, so softmax stays finite
    return TreeAttention(keys_Q_K, sees_Q_C_K)


def tree_attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    prefix_tree: TreeAttention | None = None,
    **kwargs,
):
    """transformers attention function over one trie: query [1, H, N, D], key and value [1, H_kv, N, D]."""
    chunks, chunk, _ = prefix_tree.sees_Q_C_K.shape
    heads, nodes, dim = query.shape[1:]
    query_Q_H_C_D = F.pad(query[0], (0, 0, 0, chunks * chunk - nodes)).view(heads, chunks, chunk, dim).transpose(0, 1)

    # index_select, not states[0][:, keys_Q_K]: its backward adds rows (index_add_), 2-3x faster on CPU than indexing's
    def per_chunk(states):
        return (
            states[0]
            .index_select(1, prefix_tree.keys_Q_K.flatten())
            .view(-1, *prefix_tree.keys_Q_K.shape, dim)
            .transpose(0, 1)
        )

    key_Q_Hk_K_D, value_Q_Hk_K_D = per_chunk(key), per_chunk(value)
    out_Q_H_C_D = F.scaled_dot_product_attention(
        query_Q_H_C_D,
        key_Q_Hk_K_D,
        value_Q_Hk_K_D,
        attn_mask=prefix_tree.sees_Q_C_K[:, None],
        scale=scaling,
        enable_gqa=True,
    )
    return out_Q_H_C_D.transpose(0, 1).reshape(heads, chunks * chunk, dim)[:, :nodes].transpose(0, 1)[None], None


AttentionInterface.register("sparring_prefix_tree", tree_attention_forward)


def runs_as_trees(config) -> bool:
    """Whether the model can run a trie: plain softmax attention over the whole past in every layer."""
    text = config.get_text_config()
    layer_types = getattr(text, "layer_types", None)
    windowed = getattr(text, "use_sliding_window", False) and getattr(text, "sliding_window", None)
    return (
        text.model_type in TREE_ARCHITECTURES
        and not windowed
        and (layer_types is None or all(kind == "full_attention" for kind in layer_types))
    )


def tree_hidden_states(backbone: torch.nn.Module, batch: TreeBatch, device: torch.device) -> torch.Tensor:
    """The backbone's last hidden state at every node of the trie [N, H]."""
    tokens_1_N, depths_1_N = batch.tokens_N[None].to(device), batch.depths_N[None].to(device)
    if batch.attention is None:
        return backbone(input_ids=tokens_1_N, position_ids=depths_1_N, use_cache=False).last_hidden_state[0]
    with _attention_implementation(backbone.config, "sparring_prefix_tree"):
        return backbone(
            input_ids=tokens_1_N, position_ids=depths_1_N, use_cache=False, prefix_tree=batch.attention.to(device)
        ).last_hidden_state[0]


@contextlib.contextmanager
def _attention_implementation(config, name: str):
    """The model's layers look their attention function up by this name while inside (one worker thread runs the
    model)."""
    saved = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = saved
