"""What prefilling sampling prompts cost per training step and per evaluation.

`PrefillMeter` reads the `prefill_counts` of the in-process engines a run's
models sample on (models on a service report none) and hands out what was
added since its last reading, as the `engine/prompt_tokens`,
`engine/prefilled_tokens` and `engine/prefix_hit_rate` metrics. The counts are
the engines' own, so with rollouts running ahead of training
(`max_staleness`) a reading can hold some of a neighbouring step's calls.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from ..engine.prefix_cache import PrefillCounts
from .models import TrainingModels

T = TypeVar("T")


class PrefillMeter:
    """The prefill counts of a run's local engines, read step by step (an evaluation inside a step apart)."""

    def __init__(self, models: TrainingModels):
        self.engines = models.local_engines()
        """Every distinct in-process engine the models use."""
        self._read = self._total()

    def take(self) -> PrefillCounts:
        """What the engines prefilled since the last `take`."""
        total = self._total()
        taken, self._read = total - self._read, total
        return taken

    async def apart(self, work: Awaitable[T]) -> tuple[T, PrefillCounts]:
        """Await `work` (an evaluation inside a step) and return what it prefilled, leaving the step's own counts for
        the step's next `take`."""
        step_so_far = self.take()
        result = await work
        counts = self.take()
        self._read = self._read - step_so_far
        return result, counts

    def _total(self) -> PrefillCounts:
        total = PrefillCounts()
        for engine in self.engines:
            total = total + engine.prefill_counts
        return total
