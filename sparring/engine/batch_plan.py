"""How the learner lays whole datums side by side: padded micro-batches under a token budget.

The fallback layout, for models that cannot run a prefix tree (`prefix_tree.runs_as_trees`: sliding windows,
recurrent layers, attention with sinks or soft-capping) or when `EngineConfig.learner_prefix_tree` is off: every
datum runs whole, longest first, and a `MicroBatch` stays within the budget counted as the padded tokens it runs
(rows x its longest datum).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MicroBatch:
    """Datums run through the backbone together, padded to the longest."""

    indices: list[int]
    """Positions of the datums in the learner's input list."""


def micro_batches(lengths: list[int], token_budget: int) -> list[MicroBatch]:
    """Datum indices (longest first) grouped so each micro-batch runs at most token_budget padded tokens (a datum
    longer than the budget goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for index in order:
        if current and lengths[current[0]] * (len(current) + 1) > token_budget:
            batches.append(MicroBatch(current))
            current = []
        current.append(index)
    if current:
        batches.append(MicroBatch(current))
    return batches
