"""The RL loop behind `tune()`: tasks -> episodes -> advantages -> LoRA updates.

`run_training` resolves the config once (`resolve.py`: the workflow checked
before any model loads, the tasks, the trainable models -- one LoRA adapter
each on a shared base model -- and the frozen auxiliary ones), then
repeats: take a batch of tasks, run `group_size` episodes per task
concurrently (every call batched on the engine), turn rewards into
advantages per group and role, assemble datums per trainable model,
`forward_backward` + `optim_step` each, log metrics and rollouts.
Episodes sample from the live adapters, so each step sees the weights of the
step before; snapshot opponents are retaken at the start of the steps they
are due (`TunerModelConfig.snapshot_interval_steps`). Every
`eval_interval_steps` the held-out tasks are evaluated (the configured
`baselines` once, beside the first evaluation; every number with a 95 %
interval, see `evaluation.py`), and the comparison is written to
`evaluation.json`; every `save_interval_steps`, at the end and on Ctrl-C, a
checkpoint is written (see `checkpoints.py`) from which `resume` continues
exactly. Failed episodes are data: a step trains its healthy episodes and
logs the share of each error kind (`workflow/error_kind/<kind>`); a step in
which every episode failed is warned about, `stop_after_failed_steps`
of them in a row stop the run after a checkpoint, and a run whose every step
failed whole raises at its end; neither writes a "final" adapter
(`failure_streak.py`).
Episodes are counted on the console as they finish (a bar per step
and per evaluation); at the end the reward curve (`reward.png`, `reward.svg`) and the HTML
report (`report.html`, see `sparring.logging.report`) are written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..algorithms import apply_kl_penalty, assembly_metrics, build_datums, build_sampled_masks, compute_advantages
from ..logging import ConsoleProgress, MetricsLogger, RolloutWriter, TrainingProgress, mean_metrics, read_metrics, write_report, write_reward_plot, write_reward_png
from ..rollout import Episode, run_episodes
from ..types import ModelInput
from .checkpoints import latest_checkpoint, restore_checkpoint, save_checkpoint
from .config import TuneConfig
from .evaluation import Comparison, PolicyEvaluation, evaluate_baselines, evaluate_policy
from .failure_streak import EpisodesFailingError, FailureStreak
from .models import TrainingModels
from .resolve import resolve_run

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a finished (or interrupted) run leaves."""

    run_dir: Path
    """Where config, metrics, rollouts and checkpoints were written."""
    steps: int
    """Optimizer steps taken in total."""
    history: list[dict] = field(default_factory=list)
    """Metrics of every step of this process's run."""
    evaluations: list[dict] = field(default_factory=list)
    """Evaluation metrics, with their 'step'."""
    sampler_paths: dict[str, str] = field(default_factory=dict)
    """Final PEFT adapter directory per trainable model; empty when the run trained nothing (interrupted before a step trained)."""
    interrupted: bool = False
    """True when Ctrl-C stopped the run (a checkpoint was saved)."""
    comparison: Comparison | None = None
    """The held-out evaluations of this process and the baselines beside them; None when nothing was evaluated."""
    report_path: Path | None = None
    """The run's HTML report (curves, evaluation tables, rollout browser), written at the end."""
    reward_plot_path: Path | None = None
    """The reward curve as a PNG (`reward.png`; the same chart as `reward.svg` beside it), written at the end."""


def run_training(config: TuneConfig, workflow=None, judge=None, resume: str | Path | None = None) -> RunResult:
    """Train; blocks until done. From async code, `await run_training_async(...)`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_training_async(config, workflow, judge, resume))
    raise RuntimeError("run_training was called inside a running event loop; use `await run_training_async(...)`")


async def run_training_async(config: TuneConfig, workflow=None, judge=None, resume: str | Path | None = None) -> RunResult:
    run_dir = Path(resume) if resume else Path(config.run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    run = resolve_run(config, workflow, judge, run_dir=run_dir, training=True, write_config=not resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    algorithm, models, stream = config.algorithm, run.models, run.stream
    start_step = 0
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        start_step = restore_checkpoint(checkpoint, models, stream)
        log.info("resumed %s at step %d", run_dir, start_step)
    result = RunResult(run_dir=run_dir, steps=start_step)
    total_steps = stream.num_steps
    with MetricsLogger(run_dir, tensorboard=config.logging.tensorboard, wandb_project=config.logging.wandb_project, config=config.model_dump(), resume_from_step=start_step if resume else None) as logger, TrainingProgress(total_steps, enabled=config.logging.console, start_step=start_step) as progress:
        rollouts = RolloutWriter(run_dir) if config.logging.save_rollouts else None
        step = start_step
        streak = FailureStreak(algorithm.stop_after_failed_steps)
        columns: list[PolicyEvaluation] = []
        eval_tasks = run.eval_tasks[: algorithm.eval_tasks] if algorithm.eval_tasks else run.eval_tasks

        async def evaluate_now(at_step: int, label: str) -> None:
            columns.append(await evaluate_policy(run.episode_fn, eval_tasks, models.make_tuner, run.settings, run.judge, label, "model", at_step, progress))
            result.evaluations.append({"step": at_step, **columns[-1].flat("eval/")})
            logger.log(at_step, result.evaluations[-1])
            if run.baselines and not any(c.kind == "baseline" for c in columns):
                evaluated = await evaluate_baselines(run.episode_fn, eval_tasks, models, run.settings, run.judge, run.baselines, algorithm.seed, progress)
                columns.extend(evaluated)
                logger.log(at_step, {k: v for c in evaluated for k, v in c.flat(f"baseline/{c.label}/").items()})

        try:
            for step in range(start_step, total_steps):
                snapshot_ages = models.refresh_snapshots(step)
                if algorithm.eval_interval_steps and step % algorithm.eval_interval_steps == 0 and eval_tasks:
                    await evaluate_now(step, "untrained" if step == 0 else f"step {step}")
                models.reseed(config.algorithm.seed, step)
                metrics, episodes = await train_step(run.episode_fn, next(stream), models, run.settings, run.judge, config, rollouts, step, progress)
                metrics.update(snapshot_ages)
                warning = streak.observe(episodes)
                if warning:
                    log.warning("step %d: %s", step + 1, warning)
                result.history.append(metrics)
                logger.log(step + 1, metrics)
                progress.update(step + 1, metrics)
                result.steps = step + 1
                if algorithm.save_interval_steps and (step + 1) % algorithm.save_interval_steps == 0:
                    save_checkpoint(run_dir, step + 1, models, stream)
                if streak.exhausted:
                    break
        except (KeyboardInterrupt, asyncio.CancelledError):
            result.interrupted = True
            log.warning("interrupted: saving a checkpoint at step %d", result.steps)
        failure = None if result.interrupted else streak.failure(result.steps)
        if eval_tasks and algorithm.eval_interval_steps and not result.interrupted and failure is None:
            await evaluate_now(result.steps, "trained")
        if columns:
            # Model columns first (in step order), then the baselines; the last model evaluation is the subject.
            models_first = [c for c in columns if c.kind == "model"] + [c for c in columns if c.kind == "baseline"]
            result.comparison = Comparison(models_first, subject=[c for c in columns if c.kind == "model"][-1].label)
            result.comparison.write(run_dir)
    checkpoint = save_checkpoint(run_dir, result.steps, models, stream)
    trained_nothing = not streak.healthy_steps and not start_step  # e.g. interrupted before a step trained
    if failure is None and not trained_nothing:
        result.sampler_paths = models.save_for_sampler("final")
    records = read_metrics(run_dir)
    write_reward_plot(run_dir, records)
    result.reward_plot_path = write_reward_png(run_dir, records)
    result.report_path = write_report(run_dir)
    if failure is not None:
        then = f"continue with `sparring train --resume {run_dir}`" if result.steps < total_steps else "run it again"
        raise EpisodesFailingError(f"{failure}. Checkpoint saved at {checkpoint}, no final adapter written; fix the workflow and {then}")
    return result


async def train_step(episode_fn, tasks, models: TrainingModels, settings, judge, config: TuneConfig, rollouts, step: int, progress: ConsoleProgress | None = None) -> tuple[dict[str, float], list[Episode]]:
    """One step: run the episodes, train on them, write their rollouts; returns the step's metrics and its episodes."""
    algorithm = config.algorithm
    started = time.perf_counter()
    counter = progress.episodes(f"step {step + 1} rollouts", len(tasks) * settings.group_size) if progress is not None else None
    episodes = await run_episodes(episode_fn, tasks, models.make_tuner, settings, judge, on_episode=None if counter is None else counter.add)
    rollout_time = time.perf_counter() - started
    advantages = compute_advantages(
        episodes,
        algorithm.algorithm_type,
        normalize_by_std=algorithm.normalize_advantages_by_std,
        per_role=algorithm.per_role_advantages,
        drop_zero_variance=algorithm.drop_zero_variance_groups,
    )
    datums = build_datums(episodes, advantages.advantages)
    metrics = {**episode_metrics(episodes, settings.error_reward), **advantages.metrics, **assembly_metrics(episodes, datums)}
    if algorithm.kl_coef > 0:
        sampled_masks = build_sampled_masks(episodes, advantages.advantages)
        for name, data in datums.items():
            base = await asyncio.gather(*(models.base_sampler.compute_logprobs(ModelInput.from_ints(d.model_input.to_ints() + d.loss_fn_inputs["target_tokens"].tolist()[-1:])) for d in data))
            datums[name], kl_metrics = apply_kl_penalty(data, [scores[1:] for scores in base], sampled_masks[name], algorithm.kl_coef)
            metrics.update({f"{k}/{name}" if len(datums) > 1 else k: v for k, v in kl_metrics.items()})
    train_started = time.perf_counter()
    metrics.update(await models.update(datums, algorithm))
    metrics["time/rollout"] = rollout_time
    metrics["time/train"] = time.perf_counter() - train_started
    metrics["time/step"] = time.perf_counter() - started
    if rollouts is not None:
        rollouts.write(step, episodes, advantages.advantages, models.tokenizer)
    return metrics, episodes


async def run_debug_episodes(config: TuneConfig, workflow=None, judge=None, num_tasks: int = 2, split: str = "train") -> list[Episode]:
    """Run `num_tasks` episodes (one per task) with no training: what `sparring run` shows."""
    run = resolve_run(config, workflow, judge, run_dir=Path(config.run_dir or "runs/debug"))
    tasks = (run.eval_tasks if split == "eval" else run.train_tasks)[:num_tasks]
    return await run_episodes(run.episode_fn, tasks, run.models.make_tuner, run.settings, run.judge)


async def run_evaluation(config: TuneConfig, workflow=None, judge=None, limit: int | None = None) -> Comparison:
    """Evaluate the configured models (e.g. `model.adapter_path` set to a trained adapter) and each baseline on the eval tasks.

    The model's column is 'trained' when a trainable model starts from an adapter, else 'untrained'.
    """
    run = resolve_run(config, workflow, judge, run_dir=Path(config.run_dir or "runs/eval"), evaluation=True)
    chosen = run.eval_tasks[:limit] if limit else run.eval_tasks
    label = "trained" if any(m.adapter_path for m in config.trainable_models().values()) else "untrained"
    with ConsoleProgress(enabled=config.logging.console) as progress:
        model = await evaluate_policy(run.episode_fn, chosen, run.models.make_tuner, run.settings, run.judge, label, "model", None, progress)
        baselines = await evaluate_baselines(run.episode_fn, chosen, run.models, run.settings, run.judge, run.baselines, config.algorithm.seed, progress)
    return Comparison([model, *baselines], subject=label)


def episode_metrics(episodes: list[Episode], error_reward: float) -> dict[str, float]:
    """Reward (overall, per agent, per role), errors and their kinds, and the workflows' own metrics, averaged over episodes.

    An error episode in which no trainable agent spoke has no agent to reward; it still counts in `reward/mean`,
    with `error_reward`. `workflow/error_kind/<kind>` is the share of episodes that failed with that kind.
    """
    rewards = [r for e in episodes for r in (e.rewards.values() if e.rewards or not e.error else [error_reward])]
    metrics = {"reward/mean": sum(rewards) / len(rewards) if rewards else 0.0, "episodes": float(len(episodes))}
    if rewards:
        mean = metrics["reward/mean"]
        metrics["reward/std"] = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    per_agent = [{f"agent/{agent}/reward": reward for agent, reward in e.rewards.items()} for e in episodes]
    per_role = [{f"role/{e.roles.get(agent, agent)}/reward": reward for agent, reward in e.rewards.items()} for e in episodes]
    merged = mean_metrics([{("" if "/" in k else "workflow/") + k: v for k, v in e.metrics.items()} for e in episodes])
    kinds = Counter(e.error_kind for e in episodes if e.error)
    error_kinds = {f"workflow/error_kind/{kind}": count / len(episodes) for kind, count in sorted(kinds.items())}
    return {**metrics, **mean_metrics(per_agent), **mean_metrics(per_role), **merged, **error_kinds}
