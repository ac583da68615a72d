"""The failure streak: a step in which every episode failed is called out, K of them in a row stop the run, and a
run that trained nothing fails.

Failed episodes are data, so a step goes on training its healthy episodes.
A step in which none is healthy (each raised, timed out, returned an outcome
that does not fit, or reported its own `error` metric of 1) trains nothing
useful, and such steps in a row mean the workflow is broken, not
unlucky: `FailureStreak` warns on each one with the commonest error kind and
an example message, and once `AlgorithmConfig.stop_after_failed_steps` of
them come in a row the loop saves a checkpoint and raises
`EpisodesFailingError`, so no compute is spent on a run that cannot learn
and nothing trained is lost. A run whose every step failed whole (fewer
steps than that limit, or no limit) raises it too at its end: it trained
nothing, so it writes no "final" adapter and does not end as if it had
trained. Either message leads with the streak's first error, the reason of
the first failed episode (in task order) of its first step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..rollout import Episode


class EpisodesFailingError(RuntimeError):
    """Every episode failed for `stop_after_failed_steps` steps in a row, or in every step of the run: it trained
    nothing since."""


@dataclass
class FailureStreak:
    """Counts the steps in a row in which every episode failed, and the steps of the run that trained something."""

    limit: int
    """Steps in a row that stop the run; 0 never stops it."""
    steps: int = 0
    """All-failed steps in a row so far."""
    healthy_steps: int = 0
    """Steps of this run with at least one episode that did not fail: they trained something."""
    first_error: str = ""
    """The first error of the streak's first step (its first failed episode in task order): kind and reason."""
    commonest: str = ""
    """The commonest error of the last all-failed step: its kind, share and an example message."""

    def observe(self, episodes: list[Episode]) -> str | None:
        """Count one step; the warning line when every episode of it failed, else None (and the streak ends)."""
        if not episodes or not all(episode.failed for episode in episodes):
            self.steps = 0
            self.healthy_steps += 1
            return None
        failures = [episode.failure for episode in episodes]
        if self.steps == 0:
            self.first_error = ": ".join(failures[0])
        self.steps += 1
        kind, count = Counter(kind for kind, _ in failures).most_common(1)[0]
        example = next(reason for failed_kind, reason in failures if failed_kind == kind)
        self.commonest = f"{kind} in {count} of {len(episodes)} episodes, e.g. {example}"
        return f"every episode of this step failed ({self.steps} step(s) in a row); commonest error: {self.commonest}"

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.steps >= self.limit

    def failure(self, last_step: int) -> str | None:
        """Why the run failed, having run up to `last_step`: the streak stopped it, or every step it ran failed
        whole; else None."""
        if self.exhausted:
            why = (
                f"stopped after step {last_step}: every episode failed in {self.steps} steps in a row "
                "(algorithm.stop_after_failed_steps)"
            )
        elif self.steps and not self.healthy_steps:
            why = (
                f"every episode failed in every step this run took ({self.steps}, up to step {last_step}): "
                "nothing was trained"
            )
        else:
            return None
        return f"{why}; first error: {self.first_error}; commonest error: {self.commonest}"
