"""How the learner lays datums out for the backbone: micro-batches, some continuing one shared prefix.

A GRPO step trains several completions of every prompt; each datum repeats
the prompt, and on a CPU every repeated token costs a forward and a backward
through the whole model. `plan_micro_batches` finds datums whose token ids
begin alike and puts them in a `MicroBatch` with a `prefix_length`: the
learner runs those first tokens once and the rows continue from their keys
and values, so the prefix is computed (and back-propagated through) once per
micro-batch instead of once per datum. The rest go into padded micro-batches
as before, longest first. Every micro-batch stays within the token budget,
counted as the padded tokens it runs (prefix once plus rows x longest
remainder).

Finding the groups: sorted lexicographically, datums that share a prefix sit
next to each other, and the prefix a run of them shares is the smallest
common-prefix length of neighbours in it. A run that fits the budget is one
micro-batch; one that does not is split where that smallest common prefix
is, so the parts share longer prefixes (GRPO: the common system prompt
splits into one group per prompt); a part that cannot be split is cut into
budget-sized micro-batches that each run the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MicroBatch:
    """Datums run through the backbone together."""

    indices: list[int]
    """Positions of the datums in the learner's input list."""
    prefix_length: int
    """Leading tokens every datum here has in common, run once; 0 when the rows are simply padded side by side."""


def plan_micro_batches(tokens: list[torch.Tensor], token_budget: int, min_shared_prefix: int) -> list[MicroBatch]:
    """Micro-batches covering every datum once; datums sharing at least `min_shared_prefix` leading tokens (0: never)
    share their prefix."""
    lengths = [len(t) for t in tokens]
    shared: list[MicroBatch] = []
    alone: list[int] = []
    if min_shared_prefix > 0 and len(tokens) > 1:
        order = sorted(range(len(tokens)), key=lambda i: tokens[i].tolist())
        neighbours = [_common_prefix_length(tokens[a], tokens[b]) for a, b in zip(order, order[1:])]
        _split(order, neighbours, lengths, token_budget, min_shared_prefix, shared, alone)
    else:
        alone = list(range(len(tokens)))
    padded = micro_batches([lengths[i] for i in alone], token_budget)
    return shared + [MicroBatch([alone[i] for i in batch.indices], 0) for batch in padded]


def micro_batches(lengths: list[int], token_budget: int, prefix_length: int = 0) -> list[MicroBatch]:
    """Datum indices (longest first) grouped so each micro-batch runs at most token_budget padded tokens (a datum
    longer than the budget goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for index in order:
        rows = len(current) + 1
        padded = prefix_length + (lengths[current[0]] - prefix_length) * rows if current else 0
        if current and padded > token_budget:
            batches.append(MicroBatch(current, prefix_length))
            current = []
        current.append(index)
    if current:
        batches.append(MicroBatch(current, prefix_length))
    return batches


def _split(order: list[int], neighbours: list[int], lengths: list[int], budget: int, minimum: int, shared: list[MicroBatch], alone: list[int]) -> None:
    """Plan the sorted run `order` (`neighbours[k]`: common prefix of order[k] and order[k+1])."""
    if len(order) == 1:
        alone.extend(order)
        return
    smallest = min(neighbours)
    prefix = min(smallest, min(lengths[i] for i in order) - 1)  # every row keeps at least one token of its own
    longest = max(lengths[i] for i in order)
    if prefix >= minimum and prefix + (longest - prefix) * len(order) <= budget:
        shared.append(MicroBatch(list(order), prefix))
        return
    cuts = [k + 1 for k, common in enumerate(neighbours) if common == smallest]
    if len(cuts) == len(neighbours):  # every neighbour shares the same prefix: nothing to split on
        if prefix < minimum:
            alone.extend(order)
            return
        for batch in micro_batches([lengths[i] for i in order], budget, prefix):
            members = [order[i] for i in batch.indices]
            if len(members) > 1:
                shared.append(MicroBatch(members, prefix))
            else:
                alone.extend(members)
        return
    for start, end in zip([0, *cuts], [*cuts, len(order)]):
        _split(order[start:end], neighbours[start : end - 1], lengths, budget, minimum, shared, alone)


def _common_prefix_length(a_N: torch.Tensor, b_M: torch.Tensor) -> int:
    length = min(len(a_N), len(b_M))
    differ = (a_N[:length] != b_M[:length]).nonzero()
    return int(differ[0]) if len(differ) else length
