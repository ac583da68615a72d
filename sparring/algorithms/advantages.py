"""Advantage estimation: one number per (episode, agent), from the rewards of its group.

An *estimator* is a pure function from the rewards of one group,
`rewards_G`, to their advantages, `advantages_G`; `ADVANTAGE_ESTIMATORS`
names them so a config can pick one by string (`AlgorithmConfig.algorithm_type`
is checked against it, so a new estimator is one function and one entry;
`register_estimator` adds one written elsewhere, as the config's
`algorithm_type: package.module:function` does).
`compute_advantages` decides who shares a baseline: the episodes of one task
(`Episode.group`), split by role when agents of different roles (a werewolf
and a villager) should not be compared with each other. Keeping the estimators tiny and the grouping in
one place makes each easy to read and to test against hand-computed numbers.

The advantage is one scalar per (episode, agent), which `assembly.build_datums`
puts on every sampled token of every timeline of that agent; with per-turn
credit (`WorkflowOutput.turn_rewards`) it is one scalar per call instead.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..rollout.types import Episode

Estimator = Callable[..., torch.Tensor]
"""`estimator(rewards_G, *, normalize_by_std) -> advantages_G`."""

STD_EPSILON = 1e-6


def grpo(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> torch.Tensor:
    """Group-relative: (r - mean) / (std + eps), or r - mean without std normalization.

    The std is the population std (no Bessel correction), so a group of one
    gives 0, not NaN. Meant for single-call agents: one completion, one reward.
    """
    centered_G = rewards_G - rewards_G.mean()
    if not normalize_by_std:
        return centered_G
    return centered_G / (rewards_G.std(correction=0) + STD_EPSILON)


def multi_step_grpo(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> torch.Tensor:
    """GRPO for multi-turn agents: the same group statistics, one value per episode.

    The numbers are those of `grpo`; the difference is what they mean. The
    episode's advantage is credited to every call the agent made (every
    timeline, merged or not): an agent with several timelines in one episode
    gets the same value on all of them. Naming it separately keeps configs
    honest about multi-turn credit assignment.
    """
    return grpo(rewards_G, normalize_by_std=normalize_by_std)


def rloo(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> torch.Tensor:
    """Leave-one-out: r_i minus the mean of the other rewards; a group of one gives 0.

    The baseline excludes the sample itself, so it stays unbiased without
    std normalization; `normalize_by_std` is accepted for a uniform signature
    and ignored.
    """
    size = rewards_G.numel()
    if size < 2:
        return torch.zeros_like(rewards_G)
    return (rewards_G * size - rewards_G.sum()) / (size - 1)


def reinforce(rewards_G: torch.Tensor, *, normalize_by_std: bool = True) -> torch.Tensor:
    """No baseline: the advantage is the reward (`normalize_by_std` is ignored)."""
    return rewards_G.clone()


ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "grpo": grpo,
    "multi_step_grpo": multi_step_grpo,
    "rloo": rloo,
    "reinforce": reinforce,
}


def register_estimator(name: str, estimator: Estimator) -> Estimator:
    """Add `estimator` to ADVANTAGE_ESTIMATORS as `name` (replacing an entry of that name); returns it.

    An estimator is `estimator(rewards_G, *, normalize_by_std) -> advantages_G`: `rewards_G` is float64 [G], the
    rewards (or per-turn returns) of one group (never all equal, so G >= 2, unless `drop_zero_variance_groups` is off);
    `normalize_by_std` is `algorithm.normalize_advantages_by_std` (an estimator may ignore it); it returns float [G],
    the advantage of each member, which goes on every token that member sampled.
    """
    if not callable(estimator):
        raise ValueError(
            f"{name!r} is a {type(estimator).__name__}, not an advantage function estimator(rewards_G, *, "
            "normalize_by_std)"
        )
    try:
        inspect.signature(estimator).bind(None, normalize_by_std=True)
    except TypeError as error:
        raise ValueError(
            f"{name!r} takes {inspect.signature(estimator)}, but an advantage function is called as "
            f"estimator(rewards_G, *, normalize_by_std): {error}"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): calling it will tell
    ADVANTAGE_ESTIMATORS[name] = estimator
    return estimator


def get_estimator(name: str) -> Estimator:
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]


@dataclass
class AdvantageResult:
    """The advantages of one training step and what to log about them."""

    advantages: dict[tuple[int, str], float | list[float]] = field(default_factory=dict)
    """(episode index, agent name) -> advantage of every call of the agent, or, with per-turn credit, one advantage
    per call in call order; agents of dropped groups are absent."""
    metrics: dict[str, float] = field(default_factory=dict)
    """advantage/mean, advantage/std (over kept entries), advantage/groups, advantage/dropped_groups,
    advantage/zero_variance_fraction."""


def compute_advantages(
    episodes: list[Episode],
    algorithm: str,
    *,
    normalize_by_std: bool = True,
    per_role: bool = True,
    drop_zero_variance: bool = True,
    turn_reward_discount: float = 1.0,
) -> AdvantageResult:
    """Advantages for every (episode, agent) that has a timeline, baselined within its group.

    A group is the episodes sharing `Episode.group`, split by
    `Episode.baseline_group` where a workflow or league set one; with `per_role` it is
    split by the agent's role (`episode.roles.get(agent, agent)`), so two
    players of one role in a self-play game share a group while werewolves
    and villagers do not. Errored episodes take part with the penalty reward
    the runner gave them. A group whose rewards are all equal carries no
    learning signal; with `drop_zero_variance` its entries are left out.

    Per-turn credit: when any episode carries `turn_rewards`, call t of an
    agent is valued by its return, the episode reward plus that agent's turn
    rewards from t on (missing turn rewards count 0), the one k calls later
    weighted by `turn_reward_discount` ** k (0: a call answers for its own turn
    reward alone, not for what later calls earned or gave away), and the baseline is
    taken over the calls of the same turn index within the group, so an
    early guess is compared with the other episodes' early guesses.
    """
    estimator = get_estimator(algorithm)
    per_turn = any(episode.turn_rewards for episode in episodes)
    groups: dict[tuple, list[tuple[int, str, int, float]]] = defaultdict(list)
    num_calls: dict[tuple[int, str], int] = {}
    for episode_index, episode in enumerate(episodes):
        for agent in dict.fromkeys(timeline.agent for timeline in episode.timelines):
            if agent not in episode.rewards:
                raise ValueError(
                    f"episode {episode_index} (group {episode.group}): agent {agent!r} has timelines but no reward; "
                    f"rewards are given for {sorted(episode.rewards)}"
                )
            role = episode.roles.get(agent, agent) if per_role else None
            returns = (
                _returns_per_call(episode, episode_index, agent, turn_reward_discount)
                if per_turn
                else [float(episode.rewards[agent])]
            )
            num_calls[(episode_index, agent)] = len(returns)
            for turn, value in enumerate(returns):
                groups[(episode.group, episode.baseline_group, role, turn if per_turn else None)].append(
                    (episode_index, agent, turn, value)
                )

    advantages: dict[tuple[int, str], float | list[float]] = {}
    kept: list[float] = []
    zero_variance_groups = dropped_groups = 0
    for members in groups.values():
        rewards_G = torch.tensor([value for *_, value in members], dtype=torch.float64)
        zero_variance = bool((rewards_G == rewards_G[0]).all())
        zero_variance_groups += zero_variance
        if zero_variance and drop_zero_variance:
            dropped_groups += 1
            continue
        advantages_G = estimator(rewards_G, normalize_by_std=normalize_by_std)
        if not isinstance(advantages_G, torch.Tensor) or advantages_G.shape != rewards_G.shape:
            got = (
                f"shape {list(advantages_G.shape)}"
                if isinstance(advantages_G, torch.Tensor)
                else f"a {type(advantages_G).__name__}"
            )
            raise ValueError(
                f"advantage estimator {algorithm!r} returned {got}; it returns one advantage per reward, "
                f"shape {list(rewards_G.shape)}"
            )
        for (episode_index, agent, turn, _), advantage in zip(members, advantages_G.tolist(), strict=True):
            kept.append(advantage)
            if per_turn:
                advantages.setdefault((episode_index, agent), [0.0] * num_calls[(episode_index, agent)])[turn] = (
                    advantage
                )
            else:
                advantages[(episode_index, agent)] = advantage

    kept_K = torch.tensor(kept, dtype=torch.float64)
    metrics = {
        "advantage/mean": kept_K.mean().item() if kept_K.numel() else 0.0,
        "advantage/std": kept_K.std(correction=0).item() if kept_K.numel() else 0.0,
        "advantage/groups": float(len(groups)),
        "advantage/dropped_groups": float(dropped_groups),
        "advantage/zero_variance_fraction": zero_variance_groups / len(groups) if groups else 0.0,
    }
    return AdvantageResult(advantages=advantages, metrics=metrics)


def _returns_per_call(episode: Episode, episode_index: int, agent: str, discount: float) -> list[float]:
    """The return of each of the agent's calls: the episode reward plus its turn rewards from that call on, each
    `discount` ** (calls later)."""
    indices = [index for timeline in episode.timelines if timeline.agent == agent for index in timeline.call_index]
    if not indices:
        raise ValueError(
            f"episode {episode_index}: agent {agent!r} has timelines without call_index, so per-turn "
            "credit cannot place its turns"
        )
    count = max(indices) + 1
    turn_rewards = episode.turn_rewards.get(agent, [0.0] * count)
    if len(turn_rewards) != count:
        raise ValueError(
            f"episode {episode_index}: agent {agent!r} made {count} calls but has {len(turn_rewards)} turn rewards"
        )
    reward, later, returns = float(episode.rewards[agent]), 0.0, []
    for turn_reward in reversed(turn_rewards):
        later = turn_reward + discount * later
        returns.append(reward + later)
    return returns[::-1]
