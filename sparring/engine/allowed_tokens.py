"""The allowed-token sets of constrained positions: one compact encoding shared by the sampler, rollouts and learner.

An *allowed set* is the tokens a constraint allowed at one position. It is
written as a list of ints: the sorted allowed ids (a choice list allows a
handful), or, where that is shorter, the sorted disallowed ids written as
``~id`` (negative; inside a free JSON string almost every token is allowed,
so the complement is short). An empty list means nothing was constrained
there.

The sampler records one such list per sampled token; a `Datum` carries them
flattened as two loss inputs, `allowed_counts` (per position, how many ints
its list has; 0 = unconstrained) and `allowed_tokens` (the lists
concatenated), and the learner rebuilds the same boolean masks from them with
`allowed_masks`, so both sides renormalise over exactly the same tokens.
"""

from __future__ import annotations

import numpy as np
import torch


def encode_allowed(allowed_V: torch.Tensor | np.ndarray) -> list[int]:
    """The compact list of a boolean allowed mask over the vocabulary ([] when every token is allowed)."""
    allowed_V = np.asarray(allowed_V, dtype=bool)
    if int(allowed_V.sum()) * 2 <= len(allowed_V):
        return np.flatnonzero(allowed_V).tolist()
    return np.invert(np.flatnonzero(~allowed_V)).tolist()


def allowed_masks(encoded: list[list[int]], vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean masks [C, V] of C encoded allowed sets, built in one scatter."""
    complement_C = np.array([bool(entry) and entry[0] < 0 for entry in encoded], dtype=bool)
    masks_C_V = np.repeat(complement_C[:, None], vocab_size, axis=1)
    lengths_C = np.array([len(entry) for entry in encoded])
    if lengths_C.sum():
        rows_K = np.repeat(np.arange(len(encoded)), lengths_C)
        tokens_K = np.concatenate([np.asarray(entry, dtype=np.int64) for entry in encoded])
        masks_C_V[rows_K, np.where(tokens_K >= 0, tokens_K, np.invert(tokens_K))] = ~complement_C[rows_K]
    return torch.from_numpy(masks_C_V).to(device)


def is_allowed(encoded: list[int], token: int) -> bool:
    """Whether `token` is in the encoded set (an empty set allows everything)."""
    if not encoded or encoded[0] >= 0:
        return not encoded or token in encoded
    return ~token not in encoded


def flatten_allowed(per_position: list[list[int]]) -> tuple[list[int], list[int]]:
    """(allowed_counts, allowed_tokens) datum inputs of per-position encoded sets."""
    return [len(entry) for entry in per_position], [token for entry in per_position for token in entry]


def split_allowed(counts: list[int], tokens: list[int]) -> list[list[int]]:
    """The per-position encoded sets back from a datum's (allowed_counts, allowed_tokens)."""
    per_position, start = [], 0
    for count in counts:
        per_position.append(tokens[start : start + count])
        start += count
    return per_position
