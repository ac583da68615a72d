"""The failure streak: a step in which every episode failed is called out, and K of them in a row stop the run.

Failed episodes are data, so a step goes on training its healthy episodes.
A step in which none is healthy trains nothing (every agent gets the same
penalty reward), and such steps in a row mean the workflow is broken, not
unlucky: `FailureStreak` warns on each one with the commonest error kind and
an example message, and once `AlgorithmConfig.stop_after_failed_steps` of
them come in a row the loop saves a checkpoint and raises
`EpisodesFailingError`, so no compute is spent on a run that cannot learn
and nothing trained is lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..rollout import Episode


class EpisodesFailingError(RuntimeError):
    """Every episode failed for `stop_after_failed_steps` steps in a row; the run stopped after saving a checkpoint."""


@dataclass
class FailureStreak:
    """Counts the steps in a row in which every episode failed."""

    limit: int
    """Steps in a row that stop the run; 0 never stops it."""
    steps: int = 0
    """All-failed steps in a row so far."""
    commonest: str = ""
    """The commonest error of the last all-failed step: its kind, share and an example message."""

    def observe(self, episodes: list[Episode]) -> str | None:
        """Count one step; the warning line when every episode of it failed, else None (and the streak ends)."""
        if not episodes or not all(episode.error for episode in episodes):
            self.steps = 0
            return None
        self.steps += 1
        kind, count = Counter(episode.error_kind for episode in episodes).most_common(1)[0]
        example = next(episode.error for episode in episodes if episode.error_kind == kind)
        self.commonest = f"{kind} in {count} of {len(episodes)} episodes, e.g. {example}"
        return f"every episode of this step failed ({self.steps} step(s) in a row); commonest error: {self.commonest}"

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.steps >= self.limit
