"""Keys and values of token prefixes, kept across sampling requests for each set of weights.

A multi-agent episode sends the engine the same tokens again and again: turn
k+1's prompt is turn k's prompt and reply plus a few new tokens, every player
reads the same rules, every evaluation game the same system prompt. The
sampler looks each prompt up here and prefills only the tokens after the
longest cached prefix (the SGLang RadixAttention idea).

- `PrefixCache` is a radix tree over token ids per set of weights: each
  `_Node` holds the tokens it adds to its parent's prefix and their keys and
  values (all layers, one tensor on the model's device), so any prefix of a
  cached sequence is found to the token. Every node counts against one byte
  budget; past it, the least recently used nodes go, leaves first (a lookup
  touches a path from its end to the root, so a parent is always more recent
  than its children).
- `PrefixStore` is the tree of one set of weights. The engine names the
  weights by adapter and a fingerprint of their content (the adapter's
  identity and the version counters of its LoRA tensors, which every in-place
  write bumps: an optimizer step, a load); a store asked for with another
  fingerprint than the one it was built under drops everything it held, so
  keys and values computed under old weights are never read again.
- `PrefillCounts` counts what prefills cost: prompt tokens, those read from
  the cache, those run through the model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields

import torch


@dataclass
class PrefillCounts:
    """Tokens of sampling prompts, by how their keys and values were obtained."""

    requests: int = 0
    """Sampling requests (prompts) prefilled."""
    prompt_tokens: int = 0
    """Their tokens."""
    cached_tokens: int = 0
    """Prompt tokens whose keys and values were read from the prefix cache (computed by an earlier request)."""
    prefilled_tokens: int = 0
    """Tokens run through the model to prefill (a prefix shared inside one batch, or a prompt repeated in it,
    counted once)."""

    def __sub__(self, other: PrefillCounts) -> PrefillCounts:
        return PrefillCounts(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: PrefillCounts) -> PrefillCounts:
        return PrefillCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def metrics(self, prefix: str = "engine/") -> dict[str, float]:
        """`<prefix>prompt_tokens`, `prefilled_tokens` and `prefix_hit_rate` (share of prompt tokens read from the
        cache)."""
        rate = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return {
            f"{prefix}prompt_tokens": float(self.prompt_tokens),
            f"{prefix}prefilled_tokens": float(self.prefilled_tokens),
            f"{prefix}prefix_hit_rate": rate,
        }


@dataclass(eq=False)
class _Node:
    tokens: tuple[int, ...]
    """The token ids this node adds to its parent's prefix (none for a root)."""
    kv_L_2_H_N_D: torch.Tensor | None
    """Per layer, the keys (index 0) and values (1) of those tokens, [kv heads, tokens, head dim]; None for a root."""
    parent: _Node | None = None
    children: dict[int, _Node] = field(default_factory=dict)
    """By their first token."""

    @property
    def nbytes(self) -> int:
        return 0 if self.kv_L_2_H_N_D is None else self.kv_L_2_H_N_D.numel() * self.kv_L_2_H_N_D.element_size()


@dataclass
class PrefixMatch:
    """The longest cached prefix of some tokens."""

    length: int
    """How many leading tokens are cached."""
    pieces: list[torch.Tensor]
    """Their keys and values, node by node, [layers, 2, kv heads, tokens, head dim] each."""

    def kv_L_2_H_N_D(self) -> torch.Tensor:
        return torch.cat(self.pieces, dim=3)


class PrefixCache:
    """Cached prefixes of every set of weights, within one byte budget."""

    def __init__(self, budget_bytes: int):
        if budget_bytes <= 0:
            raise ValueError(f"a prefix cache needs a positive byte budget, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.bytes = 0
        self._stores: dict[Hashable, PrefixStore] = {}
        self._recent: OrderedDict[_Node, None] = OrderedDict()  # every non-root node, least recently used first

    def store(self, weights: Hashable, fingerprint: Hashable) -> PrefixStore:
        """The tree of `weights` (an adapter name, None for the base model), emptied first if its content changed
        since (`fingerprint` differs from the one it was built under)."""
        store = self._stores.get(weights)
        if store is None or store.fingerprint != fingerprint:
            self.forget(weights)
            store = self._stores[weights] = PrefixStore(self, fingerprint)
        return store

    def forget(self, weights: Hashable) -> None:
        """Drop everything cached for `weights` (the adapter was deleted or changed)."""
        store = self._stores.pop(weights, None)
        if store is not None:
            for child in list(store.root.children.values()):
                self._drop(child)

    @property
    def nodes(self) -> int:
        return len(self._recent)

    def _touch(self, path: list[_Node]) -> None:
        for node in reversed(path):  # the end of the path first: parents stay more recent than their children
            self._recent[node] = None
            self._recent.move_to_end(node)

    def _added(self, node: _Node) -> None:
        self._recent[node] = None
        self.bytes += node.nbytes

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes and self._recent:
            self._drop(next(iter(self._recent)))

    def _drop(self, node: _Node) -> None:
        """Remove `node` and everything below it."""
        del node.parent.children[node.tokens[0]]
        stack = [node]
        while stack:
            gone = stack.pop()
            stack.extend(gone.children.values())
            self._recent.pop(gone, None)
            self.bytes -= gone.nbytes


class PrefixStore:
    """The cached prefixes computed under one set of weights."""

    def __init__(self, cache: PrefixCache, fingerprint: Hashable):
        self.cache = cache
        self.fingerprint = fingerprint
        """What the weights were when this store was made (see `PrefixCache.store`)."""
        self.root = _Node((), None)

    def match(self, tokens: list[int] | tuple[int, ...]) -> PrefixMatch:
        """The longest prefix of `tokens` held here (counted as used now)."""
        tokens = tuple(tokens)
        node, length, pieces, path = self.root, 0, [], []
        while length < len(tokens):
            child = node.children.get(tokens[length])
            if child is None:
                break
            common = _common_length(child.tokens, tokens, length)
            pieces.append(child.kv_L_2_H_N_D if common == len(child.tokens) else child.kv_L_2_H_N_D[:, :, :, :common])
            path.append(child)
            length += common
            if common < len(child.tokens):
                break
            node = child
        self.cache._touch(path)
        return PrefixMatch(length, pieces)

    def insert(self, tokens: list[int] | tuple[int, ...], kv_from: Callable[[int], torch.Tensor]) -> None:
        """Hold `tokens`; `kv_from(start)` gives the keys and values of tokens[start:] (a tensor of its own, not a
        view),
        asked only for what is not held yet. May evict anything, this insertion included, to stay within budget."""
        tokens = tuple(tokens)
        node, length, path = self.root, 0, []
        while length < len(tokens):
            child = node.children.get(tokens[length])
            if child is None:
                child = _Node(tokens[length:], kv_from(length), parent=node)
                node.children[tokens[length]] = child
                self.cache._added(child)
                path.append(child)
                break
            common = _common_length(child.tokens, tokens, length)
            if common < len(child.tokens):
                child = self._split(child, common)
            path.append(child)
            length += common
            node = child
        self.cache._touch(path)
        self.cache._evict()

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node` after its first `at` tokens; return the new upper part (its parent now), the node keeping the
        rest. Both halves are copies, so evicting one frees its memory."""
        kv = node.kv_L_2_H_N_D
        upper = _Node(node.tokens[:at], kv[:, :, :, :at].clone(), parent=node.parent)
        node.parent.children[upper.tokens[0]] = upper
        self.cache.bytes -= node.nbytes
        node.tokens, node.kv_L_2_H_N_D, node.parent = node.tokens[at:], kv[:, :, :, at:].clone(), upper
        self.cache.bytes += node.nbytes
        upper.children[node.tokens[0]] = node
        self.cache._added(upper)
        return upper


def _common_length(edge: tuple[int, ...], tokens: tuple[int, ...], start: int) -> int:
    """How many of `edge`'s tokens tokens[start:] begins with."""
    if tokens[start : start + len(edge)] == edge:
        return len(edge)
    common = 0
    for expected, actual in zip(edge, tokens[start:], strict=False):
        if expected != actual:
            break
        common += 1
    return common
