"""The training signal: a step that trained no token says why, and a run that trained none fails.

A step trains the sampled tokens whose advantage is not zero (`tokens/trained`).
When a step trains none, its update changed nothing, and one of a few causes
is behind it: no trainable agent spoke (the workflow never called a
trainable model), every episode failed, or every group's episodes got the
same reward (group-relative advantages are then all zero: the sparse reward
of a first game, a group of 2 on a small model). `TrainingSignal` names the
cause in a warning on each such step, and a run in which no step trained a
token raises `NothingTrainedError` at its end -- after its checkpoint, without
a "final" adapter, which would only equal the initial one. A deliberate dry
run opts out with `AlgorithmConfig.allow_nothing_trained`.

Before a step trains nothing, the signal thins: more and more groups tie. When
over half of a step's groups have tied for `THINNING_STEPS` steps in a row,
`TrainingSignal` warns that the policy is collapsing (and again every
`THINNING_STEPS` steps while it lasts), naming the collapse measures to read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..rollout import Episode

OPT_OUT = "algorithm.allow_nothing_trained=true"
"""The setting that makes a run that trains nothing a deliberate dry run."""
THINNING_SHARE = 0.5
"""A step whose share of tied (zero-variance) groups is above this one thins the signal."""
THINNING_STEPS = 3
"""Thinning steps in a row before the collapse warning."""


class NothingTrainedError(RuntimeError):
    """No step of the run trained a token: its adapter is the one it started from."""


def untrained_cause(episodes: list[Episode], metrics: dict[str, float]) -> str | None:
    """Why a step with these episodes and metrics trained no token; None when it trained some."""
    if metrics.get("tokens/trained", 0.0) > 0:
        return None
    if not any(episode.timelines for episode in episodes):
        return (
            "no trainable agent spoke (no episode called a trainable model: check that the workflow's agents "
            "use `model`, or a target_tag in trainable_targets)"
        )
    if all(episode.failed for episode in episodes):
        return "every episode failed"
    groups = int(metrics.get("advantage/groups", 0))
    if groups and metrics.get("advantage/zero_variance_fraction", 0.0) >= 1.0:
        rewards = sorted({reward for episode in episodes for reward in episode.rewards.values()})
        shown = ", ".join(f"{reward:g}" for reward in rewards[:5]) + (", ..." if len(rewards) > 5 else "")
        return (
            f"every group's episodes got the same reward ({groups} group(s); rewards seen: {shown}), so "
            "every advantage is 0: "
            "give partial credit in the reward, raise algorithm.group_size, or sample more diversely "
            "(model.temperature)"
        )
    return "every sampled token's advantage is 0 (check the rewards and algorithm.algorithm_type)"


@dataclass
class TrainingSignal:
    """Counts the steps of a run that trained a token, and remembers why the last one that did not trained none."""

    trained_before: bool = False
    """A resumed run's earlier steps trained a token."""
    trained_steps: int = 0
    """Steps of this process's run that trained at least one token."""
    last_cause: str = ""
    """Why the last step that trained no token trained none."""
    thinning_streak: int = 0
    """Steps in a row on which over `THINNING_SHARE` of the groups tied."""

    def observe(self, episodes: list[Episode], metrics: dict[str, float]) -> str | None:
        """Count one step; the warning line when it trained no token, else None."""
        tied = metrics.get("advantage/zero_variance_fraction", 0.0)
        self.thinning_streak = self.thinning_streak + 1 if tied > THINNING_SHARE else 0
        cause = untrained_cause(episodes, metrics)
        if cause is None:
            self.trained_steps += 1
            return None
        self.last_cause = cause
        return f"trained no token: {cause}"

    def collapse_warning(self, metrics: dict[str, float]) -> str | None:
        """The warning line when the last observed step made the thinning streak a multiple of `THINNING_STEPS`."""
        if not self.thinning_streak or self.thinning_streak % THINNING_STEPS:
            return None
        return (
            f"the policy may be collapsing: over {THINNING_SHARE:.0%} of the groups tied for "
            f"{self.thinning_streak} steps in a row "
            f"({metrics.get('advantage/zero_variance_fraction', 0.0):.0%} now; collapse/entropy "
            f"{metrics.get('collapse/entropy', float('nan')):.3f}, "
            f"collapse/distinct_share {metrics.get('collapse/distinct_share', float('nan')):.2f}): "
            "sample more diversely (model.temperature), vary opponents or seeds within a group, or give partial credit"
        )

    @property
    def trained_anything(self) -> bool:
        """Some step of the run (this process's or, resumed, an earlier one) trained a token."""
        return self.trained_before or self.trained_steps > 0

    def failure(self, steps: int) -> str:
        """The one-line reason a run of `steps` steps that trained nothing fails."""
        return f"no step of this run trained a token ({steps} step(s)); last cause: {self.last_cause}"
