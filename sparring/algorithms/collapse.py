"""Signs that a policy is collapsing: the measures a step logs so that a run turning deterministic is seen, not guessed.

GRPO learns only from groups whose episodes differ. As a policy sharpens, its sampled tokens carry less entropy,
a group's episodes repeat one another and their rewards tie, and the groups drop out one by one until a step
trains nothing (the tic-tac-toe league's steps 11-20). `collapse_metrics` measures the first two per step, beside
the tied-reward share `advantage/zero_variance_fraction`:

- `collapse/entropy`: mean -log p of the sampled tokens, an unbiased estimate of the policy's per-token entropy
  under the distribution it sampled from (the masked one on constrained positions), with no extra forward pass;
- `collapse/distinct_share`: per group and agent role, distinct sampled token sequences over members, averaged
  (1.0: every member acted differently; 1/G: all G acted alike).

`CollapseResponse` acts on the tied share instead of only reporting it: it widens the exploration of the next
training rollouts while groups keep tying (`algorithm.collapse_response`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..rollout import Episode


def collapse_metrics(episodes: list[Episode]) -> dict[str, float]:
    """`collapse/entropy` and `collapse/distinct_share` of a step's episodes (empty when no trainable agent spoke)."""
    negative_logprobs = [
        -logprob
        for episode in episodes
        for timeline in episode.timelines
        for logprob, sampled in zip(timeline.logprobs, timeline.loss_mask, strict=True)
        if sampled
    ]
    if not negative_logprobs:
        return {}
    actions: dict[tuple[int, str], list[tuple[int, ...]]] = defaultdict(list)
    for episode in episodes:
        for agent in dict.fromkeys(timeline.agent for timeline in episode.timelines):
            sampled = tuple(
                token
                for timeline in episode.timelines
                if timeline.agent == agent
                for token, kept in zip(timeline.tokens, timeline.loss_mask, strict=True)
                if kept
            )
            actions[(episode.group, episode.roles.get(agent, agent))].append(sampled)
    shares = [len(set(members)) / len(members) for members in actions.values()]
    return {
        "collapse/entropy": sum(negative_logprobs) / len(negative_logprobs),
        "collapse/distinct_share": sum(shares) / len(shares),
    }


@dataclass
class CollapseResponse:
    """What the trainer does when groups keep tying: it widens the training rollouts' exploration, and narrows it
    back once they differ again.

    Each step, after its advantages are known: a tied-reward share (`advantage/zero_variance_fraction`) above `bound`
    extends a streak; once the streak reaches `patience` steps, exploration moves up by `factor` (from at least
    `step_up`), to at most `high`, at every further tied step. A step at or below `bound` ends the streak and moves
    exploration back down by `factor`, to no less than `base` (the configured `algorithm.exploration`).
    """

    base: float
    """The configured exploration, where the response starts and returns to."""
    bound: float
    """The tied-reward share above which a step counts as tied."""
    patience: int
    """Tied steps in a row before the response acts."""
    factor: float
    """How much one response multiplies (or, on the way back, divides) the exploration."""
    step_up: float
    """The smallest exploration a response sets (a base of 0 cannot be multiplied up)."""
    high: float
    """The most exploration a response sets."""
    exploration: float
    """The exploration of the next rollout."""
    streak: int = 0
    """Tied steps in a row so far."""

    def step(self, zero_variance_fraction: float | None) -> float:
        """The exploration of the next rollout, after a step with this tied-reward share (None: no group, unchanged)."""
        if zero_variance_fraction is None:
            return self.exploration
        if zero_variance_fraction > self.bound:
            self.streak += 1
            if self.streak >= self.patience:
                self.exploration = min(self.high, max(self.exploration * self.factor, self.step_up))
        else:
            self.streak = 0
            self.exploration = max(self.base, self.exploration / self.factor)
        return self.exploration
