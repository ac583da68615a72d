"""Signs that a policy is collapsing: the measures a step logs so that a run turning deterministic is seen, not guessed.

GRPO learns only from groups whose episodes differ. As a policy sharpens, its sampled tokens carry less entropy,
a group's episodes repeat one another and their rewards tie, and the groups drop out one by one until a step
trains nothing (the tic-tac-toe league's steps 11-20). `collapse_metrics` measures the first two per step, beside
the tied-reward share `advantage/zero_variance_fraction`:

- `collapse/entropy`: mean -log p of the sampled tokens, an unbiased estimate of the policy's per-token entropy
  under the distribution it sampled from (the masked one on constrained positions), with no extra forward pass;
- `collapse/distinct_share`: per group and agent role, distinct sampled token sequences over members, averaged
  (1.0: every member acted differently; 1/G: all G acted alike).
"""

from __future__ import annotations

from collections import defaultdict

from ..rollout import Episode


def collapse_metrics(episodes: list[Episode]) -> dict[str, float]:
    """`collapse/entropy` and `collapse/distinct_share` of a step's episodes (empty when no trainable agent spoke)."""
    negative_logprobs = [-logprob for episode in episodes for timeline in episode.timelines for logprob, sampled in zip(timeline.logprobs, timeline.loss_mask) if sampled]
    if not negative_logprobs:
        return {}
    actions: dict[tuple[int, str], list[tuple[int, ...]]] = defaultdict(list)
    for episode in episodes:
        for agent in dict.fromkeys(timeline.agent for timeline in episode.timelines):
            sampled = tuple(token for timeline in episode.timelines if timeline.agent == agent for token, kept in zip(timeline.tokens, timeline.loss_mask) if kept)
            actions[(episode.group, episode.roles.get(agent, agent))].append(sampled)
    shares = [len(set(members)) / len(members) for members in actions.values()]
    return {"collapse/entropy": sum(negative_logprobs) / len(negative_logprobs), "collapse/distinct_share": sum(shares) / len(shares)}
