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

import torch


def encode_allowed(allowed_V: torch.Tensor) -> list[int]:
    """The compact list of a boolean allowed mask over the vocabulary ([] when every token is allowed)."""
    allowed_count = int(allowed_V.sum())
    if allowed_count * 2 <= len(allowed_V):
        return allowed_V.nonzero().squeeze(-1).tolist()
    return [~token for token in (~allowed_V).nonzero().squeeze(-1).tolist()]


def allowed_masks(encoded: list[list[int]], vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean masks [C, V] of C encoded allowed sets, built in one scatter."""
    complement_C = torch.tensor([bool(entry) and entry[0] < 0 for entry in encoded], dtype=torch.bool)
    masks_C_V = complement_C[:, None].expand(len(encoded), vocab_size).clone()
    rows = [row for row, entry in enumerate(encoded) for _ in entry]
    tokens = [token if token >= 0 else ~token for entry in encoded for token in entry]
    if rows:
        rows_K = torch.tensor(rows)
        masks_C_V[rows_K, torch.tensor(tokens)] = ~complement_C[rows_K]
    return masks_C_V.to(device)


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
