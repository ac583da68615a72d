"""One training step's two halves: the rollout (a batch of tasks played) and the update (episodes -> LoRA step).

`run_rollout` plays `group_size` episodes per task with the models a tuner
factory hands out; `learn` turns finished episodes into advantages per group
and role, assembles datums per trainable model (with the KL penalty towards
the base model when `kl_coef` > 0), runs `forward_backward` + `optim_step`
for each (with `algorithm.entropy_target`, the entropy bonus's coefficient
steered from the step's entropy first), and writes the rollouts. The run
loop (`pipeline.py`) plays each step's rollout, then learns from it; with
`max_staleness` > 0 later steps' rollouts run while an earlier step learns.
`episode_metrics` is the rewards, errors and workflow metrics of a step.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from ..algorithms import (
    CollapseResponse,
    EntropySteering,
    apply_kl_penalty,
    assembly_metrics,
    build_datums,
    build_sampled_masks,
    collapse_metrics,
    compute_advantages,
    importance_weights,
    weight_advantages,
)
from ..integrations import TunerHandle
from ..logging import ConsoleProgress, RolloutWriter, mean_metrics
from ..rollout import Episode, RunnerSettings, run_episodes
from ..types import ModelInput
from .checkpoint_integrity import check_finite_weights
from .collapse_response_config import EXPLORATION_METRIC
from .config import TuneConfig
from .entropy_target_config import COEF_METRIC
from .models import TrainingModels, step_seed


async def run_rollout(
    episode_fn,
    tasks: list[dict],
    make_tuner: Callable[[], TunerHandle],
    settings: RunnerSettings,
    judge,
    step: int,
    seed: int,
    progress: ConsoleProgress | None = None,
) -> list[Episode]:
    """Step `step`'s episodes of a run seeded `seed`: every task `group_size` times, counted on `progress` as they
    finish."""
    counter = (
        progress.episodes(f"step {step + 1} rollouts", len(tasks) * settings.group_size)
        if progress is not None
        else None
    )
    return await run_episodes(
        episode_fn,
        tasks,
        make_tuner,
        settings,
        judge,
        on_episode=None if counter is None else counter.add,
        seed=step_seed(seed, step),
    )


async def learn(
    episodes: list[Episode],
    models: TrainingModels,
    settings: RunnerSettings,
    config: TuneConfig,
    rollouts: RolloutWriter | None,
    step: int,
    total_steps: int,
    entropy: EntropySteering | None = None,
    collapse: CollapseResponse | None = None,
) -> dict[str, float]:
    """Advantages, datums and one optimizer step per trainable model from `episodes` (step `step` of `total_steps`,
    which the learning-rate schedule reads; `entropy` steers the entropy bonus's coefficient from the episodes'
    entropy, `collapse` the next rollout's exploration from their tied groups, if given); returns the step's metrics.

    Episodes drawn wider than the policy (exploration, a raised temperature) weight their advantages by their
    importance weight (`algorithms.exploration`), so the update is the policy's own gradient."""
    algorithm = config.algorithm
    advantages = compute_advantages(
        episodes,
        algorithm.algorithm_type,
        normalize_by_std=algorithm.normalize_advantages_by_std,
        per_role=algorithm.per_role_advantages,
        drop_zero_variance=algorithm.drop_zero_variance_groups,
        turn_reward_discount=algorithm.turn_reward_discount,
    )
    weights, weight_metrics = importance_weights(episodes, algorithm.importance_weight_cap)
    weighted = weight_advantages(advantages.advantages, weights) if weight_metrics else advantages.advantages
    datums = build_datums(episodes, weighted)
    metrics = {
        **episode_metrics(episodes, settings.error_reward),
        **advantages.metrics,
        **assembly_metrics(episodes, datums),
    }
    metrics |= {**collapse_metrics(episodes), **weight_metrics}
    if collapse is not None:
        tied = (
            advantages.metrics["advantage/zero_variance_fraction"] if advantages.metrics["advantage/groups"] else None
        )
        metrics[EXPLORATION_METRIC] = models.rollout_exploration = collapse.step(tied)
    if algorithm.kl_coef > 0:
        sampled_masks = build_sampled_masks(episodes, weighted)
        for name, data in datums.items():
            base = await asyncio.gather(
                *(
                    models.base_sampler.compute_logprobs(
                        ModelInput.from_ints(d.model_input.to_ints() + d.loss_fn_inputs["target_tokens"].tolist()[-1:])
                    )
                    for d in data
                )
            )
            datums[name], kl_metrics = apply_kl_penalty(
                data, [scores[1:] for scores in base], sampled_masks[name], algorithm.kl_coef
            )
            metrics.update({f"{k}/{name}" if len(datums) > 1 else k: v for k, v in kl_metrics.items()})
    train_started = time.perf_counter()
    adam_params = algorithm.adam_params(step, total_steps)
    metrics["optim/learning_rate"] = adam_params.learning_rate
    loss_fn_config = dict(algorithm.loss_fn_config)
    if entropy is not None:
        metrics[COEF_METRIC] = loss_fn_config["entropy_coef"] = entropy.step(metrics.get("collapse/entropy"))
    metrics.update(await models.update(datums, algorithm.loss_fn, loss_fn_config or None, adam_params))
    await check_finite_weights(models.clients, step + 1)  # before anything saves them
    metrics["time/train"] = time.perf_counter() - train_started
    if rollouts is not None:
        rollouts.write(step + 1, episodes, weighted, models.tokenizer)  # numbered as the console and metrics.jsonl
    return metrics


def episode_metrics(episodes: list[Episode], error_reward: float) -> dict[str, float]:
    """Reward (overall, per agent, per role), failures and their kinds, and the workflows' own metrics, averaged
    over episodes.

    An episode in which no trainable agent spoke has no agent to reward; it still counts in `reward/mean`, with the
    workflow's reward (or `error_reward` when it failed). The framework's bookkeeping has its own names and never
    overwrites a workflow's metric: `episode/error_rate` is the share of episodes that failed (a workflow-reported
    `error` of 1 included) and `episode/error_kind/<kind>` the share that failed with that kind; a workflow's own
    `error` is logged as it gave it, `workflow/error`.
    """
    rewards = [
        r
        for e in episodes
        for r in (
            e.rewards.values()
            if e.rewards
            else [e.reward]
            if e.reward is not None
            else [error_reward]
            if e.error
            else []
        )
    ]
    failures = [e.failure for e in episodes if e.failed]
    metrics = {
        "reward/mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "episodes": float(len(episodes)),
        "episode/error_rate": len(failures) / len(episodes) if episodes else 0.0,
    }
    if rewards:
        mean = metrics["reward/mean"]
        metrics["reward/std"] = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    per_agent = [{f"agent/{agent}/reward": reward for agent, reward in e.rewards.items()} for e in episodes]
    per_role = [
        {f"role/{e.roles.get(agent, agent)}/reward": reward for agent, reward in e.rewards.items()} for e in episodes
    ]
    merged = mean_metrics([{("" if "/" in k else "workflow/") + k: v for k, v in e.metrics.items()} for e in episodes])
    kinds = Counter(kind for kind, _ in failures)
    error_kinds = {f"episode/error_kind/{kind}": count / len(episodes) for kind, count in sorted(kinds.items())}
    return {**metrics, **mean_metrics(per_agent), **mean_metrics(per_role), **merged, **error_kinds}
