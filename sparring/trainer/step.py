"""One training step: its two halves (the rollout and the update), the hooks user code joins it with, and the
supervised warm-start steps before the first one. Its batch of tasks comes from the task stream (`TaskStream`,
`dataset.py`).

`run_rollout` plays `group_size` episodes per task with the models a tuner factory hands out; `learn` turns finished
episodes into advantages per group and role, assembles datums per trainable model (with the KL penalty towards the
base model when `kl_coef` > 0), runs `forward_backward` + `optim_step` for each (with `algorithm.entropy_target`, the
entropy bonus's coefficient steered from the step's entropy first), checks the weights finite, and writes the
rollouts. `episode_metrics` is the rewards, errors and workflow metrics of a step. The run loop (`pipeline.py`) plays
each step's rollout, then learns from it; with `max_staleness` > 0 later steps' rollouts run while an earlier one
learns.

A `StepHook` is the public extension point of the step sequence: `before_rollout` sees a step's tasks
(`StepStart`) before a single episode of it plays, `after_training` sees its metrics and episodes (`StepEnd`) once
its update is done and may add metrics of its own, logged with the step's. Both may be plain or `async` methods. The
same hook runs at any staleness: the rollout of step k may begin before step k - 1 has trained
(`StepStart.weights_version` says which weights sample it), and `after_training` still comes once per step, in step
order. Hooks are given to `run_training(..., hooks=[...])` or `tune(..., step_hooks=[...])` as objects, or in a
config as import paths of classes built with no arguments (`step_hooks:`, checked by `config_file.import_step_hook`,
built with the run by `resolve.build_step_hooks`). An error in a hook stops the run after the checkpoint of the last
completed step, as any error of the trainer's own.

The warm start: some skills come slowly from rewards and fast from answers (on tic-tac-toe, cross-entropy on the
solver's moves reached 0.71 on unseen positions where the same minutes of league games reached about half,
docs/results.md). `warm_start:` gives a run such answers first: `steps` optimizer steps of cross-entropy on the
assistant replies of chat examples, through the training client RL then continues with, on a fresh optimizer.
`supervised_datum` makes an example a Tinker `Datum`: the chat rendered as the policy sees it, the reply's tokens and
its end-of-turn token as targets; the examples and their batches come read and ordered from `resolve_run`, so a bad
file fails before any model loads. It runs on a new run only (a checkpoint holds its result; a stop signal during it
ends the run with a checkpoint of the weights taught so far); its losses are logged at step 0.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from ..logging import ConsoleProgress, RolloutWriter, TrainingProgress, mean_metrics
from ..models.renderer import ChatRenderer, get_renderer
from ..rollout import Episode, RunnerSettings, run_episodes
from ..types import AdamParams, Datum, ModelInput
from .config import TuneConfig
from .dataset import DatasetError, TaskStream
from .models import TrainingModels, step_seed
from .safeguards import check_finite_weights
from .sections import COEF_METRIC, EXPLORATION_METRIC, WarmStartConfig

if TYPE_CHECKING:
    from ..rollout import Episode
    from .safeguards import StopSignals


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


@dataclass(frozen=True)
class StepStart:
    """A training step about to play its rollout."""

    step: int
    """The step's index, from 0 (the checkpoint after it is `step + 1`)."""
    tasks: list[dict]
    """The batch of tasks the rollout plays, each `group_size` times."""
    weights_version: int
    """Optimizer steps of the weights that sample the rollout: `step` on-policy, less with `max_staleness` > 0."""
    snapshot_ages: dict[str, float]
    """`snapshot/<name>/age_steps` of the snapshot opponents the rollout plays against."""


@dataclass(frozen=True)
class StepEnd:
    """A training step whose update is done, before it is logged."""

    step: int
    """The step's index, from 0."""
    metrics: dict[str, float]
    """What the step logs (read-only here: return a dict from `after_training` to add metrics)."""
    episodes: list[Episode]
    """The episodes it trained on, grouped by task."""


class StepHook:
    """Base class of a step hook: override either method; both do nothing here."""

    def before_rollout(self, start: StepStart) -> None:
        """Called once per step before its first episode plays."""

    def after_training(self, end: StepEnd) -> dict[str, float] | None:
        """Called once per step after its optimizer step; a returned dict is logged with the step's metrics."""
        return None


async def call_hook(method, argument) -> dict[str, float] | None:
    """Call a hook's method, awaiting it when it is async."""
    result = method(argument)
    return await result if inspect.isawaitable(result) else result


WARM_STARTED = "warm-started"
"""The name its weights are saved under (`save_state`) before RL reloads them with a fresh optimizer."""
REPORT_EVERY_STEPS = 25
"""Console lines while it runs: one every this many steps, with the mean loss of the steps since the last line."""


def supervised_datum(renderer: ChatRenderer, example: dict, where: str) -> Datum:
    """The example's chat up to its last message as the prompt, that assistant reply (and its end-of-turn token) as
    the weighted targets."""
    messages = example.get("messages")
    if (
        not isinstance(messages, list)
        or len(messages) < 2
        or not all(isinstance(m, dict) for m in messages)
        or messages[-1].get("role") != "assistant"
    ):
        raise DatasetError(
            f"{where}: a warm-start example needs `messages`, a chat ending in the assistant reply to learn"
        )
    reply = messages[-1].get("content")
    weight = example.get("weight", 1.0)
    if not isinstance(reply, str) or not reply:
        raise DatasetError(f"{where}: the last message's content must be the reply's text, got {reply!r}")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise DatasetError(f"{where}: weight must be a positive number, got {weight!r}")
    return weighted_datum(
        renderer.render(messages[:-1]), renderer.encode_text(reply) + renderer.stop_token_ids[:1], float(weight)
    )


def weighted_datum(prompt: list[int], reply: list[int], weight: float) -> Datum:
    """A cross-entropy datum: `prompt` then `reply`, the reply's tokens the targets, each weighted `weight`."""
    tokens = prompt + reply
    weights = [0.0] * (len(prompt) - 1) + [weight] * len(reply)
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights}
    )


async def warm_start(
    config: WarmStartConfig,
    examples: list[dict],
    batches: TaskStream,
    models: TrainingModels,
    progress: TrainingProgress,
    stop: StopSignals,
) -> dict[str, float]:
    """Run the supervised steps on `examples`, `batches` of row indices (both read and ordered with the run,
    `resolve_run`); returns their metrics (loss per weighted target token: the first step's, and the mean of the last
    REPORT_EVERY_STEPS steps')."""
    started = time.perf_counter()
    key = config.model_key(list(models.clients))
    client, adam_params = models.clients[key], AdamParams(learning_rate=config.learning_rate)
    renderer = get_renderer(client.get_tokenizer())
    data = [
        supervised_datum(renderer, example, f"warm_start.dataset: row {index}")
        for index, example in enumerate(examples)
    ]
    target_weights = [sum(datum.loss_fn_inputs["weights"].tolist()) for datum in data]
    losses, step_activity = [], progress.activity
    for step, rows in enumerate(batches):
        stop.check()  # a stop signal ends the run here, its checkpoint holding the weights taught so far
        progress.activity = f"warm start {step + 1}/{config.steps}"  # what the console's heartbeat names
        picked = [row["row"] for row in rows]
        batch = [data[index] for index in picked]
        output, _ = await asyncio.gather(
            client.forward_backward(batch, "cross_entropy", None), client.optim_step(adam_params)
        )
        losses.append(output.loss / sum(target_weights[index] for index in picked))
        if progress.enabled and ((step + 1) % REPORT_EVERY_STEPS == 0 or step + 1 == config.steps):
            progress.line(
                f"warm start {step + 1}/{config.steps}: loss per target token {_recent(losses):.3f} (mean "
                f"of the last {REPORT_EVERY_STEPS} steps)"
            )
    progress.activity = step_activity
    # RL starts with a fresh optimizer: Adam's moments, scaled to the supervised gradients, would shrink its updates
    # to nothing for the first RL steps.
    saved = await client.save_state(WARM_STARTED)
    await client.load_weights(saved.path)
    return {
        "warm_start/steps": float(config.steps),
        "warm_start/loss_first": losses[0],
        "warm_start/loss_last": _recent(losses),
        "warm_start/examples": float(len(data)),
        "time/warm_start": time.perf_counter() - started,
    }


def _recent(losses: list[float]) -> float:
    """The mean loss of the last REPORT_EVERY_STEPS steps (one batch's loss is noisy)."""
    recent = losses[-REPORT_EVERY_STEPS:]
    return sum(recent) / len(recent)
