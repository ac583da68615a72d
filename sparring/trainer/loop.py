"""The run behind `tune()`: `run_training` from a config to a `RunResult`, and the run folder it claims; and the two
other ways a config runs, debug episodes and evaluation.

`run_training` resolves the config once (`resolve.py`: the workflow checked before any model loads, the tasks, the
trainable models -- one LoRA adapter each on a shared base model -- and the frozen auxiliary ones), resumes from the
latest checkpoint when asked, takes the warm start's supervised steps on a new run (`step.py`), and runs every step
in the run loop (`RunLoop`, `pipeline.py`): tasks -> episodes -> advantages -> LoRA updates, each step's rollout on
the live weights or, with `algorithm.max_staleness` > 0, on frozen older ones while earlier steps train. After the
last step the held-out tasks are evaluated and the weights validated once more; the comparison is written to
`evaluation.json`; a last checkpoint is written, then the "final" adapters -- unless the run was stopped, its
episodes kept failing or it trained nothing (`safeguards.py`: `EpisodesFailingError`, `NothingTrainedError`, each
raised after the checkpoint so nothing is lost); a SIGINT or SIGTERM stops it cleanly at a step boundary
(`StopSignals`, `safeguards.py`). At the end the reward curve (`reward.png`, `reward.svg`) and the
HTML report (`report.html`, `sparring.logging.report`) are written. `run_debug_episodes` (`sparring run`) and
`run_evaluation` (`sparring eval`) resolve the same config and play episodes without training.

Run folders never mix: a training run starts in a new or empty folder, continues its own with `resume`, or replaces a
finished one with `overwrite`. Re-running into a folder that holds a run would append a second run's steps to the
first's metrics (steps 1, 2, 1, 2: one zig-zag curve in the report) and mix their checkpoints and rollouts, so
`claim_run_folder` refuses it in one line that names both ways on (the shape of the cookbook's
`behavior_if_log_dir_exists`). A folder holds a run when it holds one of `RUN_MARKERS`; `overwrite` deletes only such
a folder, and a folder of other files is used as it is, never deleted.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..logging import (
    ConsoleProgress,
    MetricsLogger,
    TrainingProgress,
    read_metrics,
    write_report,
    write_reward_plot,
    write_reward_png,
)
from ..logging.metrics import METRICS_FILE, repair_torn_end
from ..rollout import Episode, run_episodes
from .checkpoints import clean_interrupted_saves, restore_checkpoint
from .config import TuneConfig
from .evaluation import Comparison, Validation, evaluate_baselines, evaluate_policy
from .pipeline import RunLoop, StepSequence
from .resolve import resolve_run
from .safeguards import OPT_OUT, EpisodesFailingError, NothingTrainedError, Stopped, StopSignals
from .schema import ConfigError, lingering_threads, lingering_warning
from .step import StepHook, warm_start

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
    """Final PEFT adapter directory per trainable model; empty when the run trained nothing (interrupted before a
    step trained)."""
    best: Validation | None = None
    """With `validation:`, the validation of the adapter kept as `best` (its steps and metric); else None."""
    best_paths: dict[str, str] = field(default_factory=dict)
    """With `validation:`, the `best` sampler weights per trainable model (`BestAdapter`, `evaluation.py`)."""
    interrupted: bool = False
    """True when Ctrl-C or SIGTERM stopped the run before its end (a checkpoint of the last completed step was
    saved, no final adapter)."""
    stop_signal: int | None = None
    """The signal that stopped it (SIGINT, SIGTERM); None when it ran to its end or was stopped otherwise."""
    checkpoint: Path | None = None
    """The checkpoint written last: `sparring train --resume run_dir` continues from it."""
    comparison: Comparison | None = None
    """The held-out evaluations of this process and the baselines beside them; None when nothing was evaluated."""
    report_path: Path | None = None
    """The run's HTML report (curves, evaluation tables, rollout browser), written at the end."""
    reward_plot_path: Path | None = None
    """The reward curve as a PNG (`reward.png`; the same chart as `reward.svg` beside it), written at the end."""


def run_training(
    config: TuneConfig,
    workflow=None,
    judge=None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    hooks: Sequence[StepHook] = (),
) -> RunResult:
    """Train; blocks until done. From async code, `await run_training_async(...)`. `hooks` run at both ends of every
    step (`StepHook`), after those the config names."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        try:
            return asyncio.run(run_training_async(config, workflow, judge, resume, overwrite, hooks))
        finally:
            if threads := lingering_threads():
                log.warning(lingering_warning(threads))
    raise RuntimeError("run_training was called inside a running event loop; use `await run_training_async(...)`")


async def run_training_async(
    config: TuneConfig,
    workflow=None,
    judge=None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    hooks: Sequence[StepHook] = (),
) -> RunResult:
    """Train in `config.run_dir` (new or empty; `overwrite` replaces a run there), or continue the run in `resume`.

    SIGINT and SIGTERM stop it at the last completed step with a checkpoint (`StopSignals`); it returns then
    with `interrupted` and the signal in `stop_signal`."""
    stop = StopSignals()
    stop.install()  # before the models load: a signal meanwhile stops the run at its first step boundary
    try:
        run_dir = Path(resume) if resume else Path(config.run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")

        def claim() -> None:  # after the config checked out: its own error comes first, and --overwrite deletes nothing
            claim_run_folder(run_dir, resume=bool(resume), overwrite=overwrite)
            clean_interrupted_saves(run_dir)

        run = resolve_run(
            config,
            workflow,
            judge,
            run_dir=run_dir,
            training=True,
            write_config=not resume,
            resume=bool(resume),
            checked=claim,
        )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            start_step, saved_versions = 0, {}
            saved = run.resumed_from  # the task stream starts at its data position
            if saved is not None:
                start_step, saved_versions = restore_checkpoint(saved, run.models)
                repair_torn_end(run_dir / METRICS_FILE, start_step, saved.state.get("metrics"), saved.directory)
                log.info("resumed %s at step %d", run_dir, start_step)
            every_hook = [*run.step_hooks, *hooks]
            teach_first = run.warm_start_batches is not None  # a new run's: a checkpoint holds the warm start
            return await _train(config, run, run_dir, resume, start_step, saved_versions, stop, every_hook, teach_first)
        finally:
            run.models.release()  # the run's weights are saved; the process's engines must not keep them
    finally:
        stop.restore()


async def _train(
    config: TuneConfig,
    run,
    run_dir: Path,
    resume,
    start_step: int,
    saved_versions: dict,
    stop: StopSignals,
    hooks: list[StepHook],
    teach_first: bool,
) -> RunResult:
    algorithm, models, stream = config.algorithm, run.models, run.stream
    result = RunResult(run_dir=run_dir, steps=start_step)
    previous_metrics = (
        [record for record in read_metrics(run_dir) if record["step"] <= start_step] if start_step else []
    )
    total_steps = stream.num_steps
    with (
        MetricsLogger(
            run_dir,
            tensorboard=config.logging.tensorboard,
            wandb_project=config.logging.wandb_project,
            config=config.model_dump(),
            resume_from_step=start_step if resume else None,
        ) as logger,
        TrainingProgress(total_steps, enabled=config.logging.console, start_step=start_step) as progress,
    ):
        sequence = StepSequence(run, run_dir, start_step, logger, progress, stop, hooks, previous_metrics)
        loop = RunLoop(sequence, saved_versions)
        record, streak, signal, held_out = sequence.record, sequence.streak, sequence.signal, sequence.held_out
        try:
            if teach_first:
                examples, batches = run.warm_start_examples, run.warm_start_batches
                logger.log(0, await warm_start(config.warm_start, examples, batches, models, progress, stop))
            await loop.run()
            failure = streak.failure(record.steps)
            untrained = not signal.trained_anything and not algorithm.allow_nothing_trained and failure is None
            if failure is None and not untrained:
                if held_out.evaluates:
                    await stop.cancelling(held_out.evaluate(record.steps, "trained", models.make_tuner))
                await sequence.validate(record.steps, models.make_tuner)
        except (Stopped, KeyboardInterrupt, asyncio.CancelledError):
            result.interrupted, result.stop_signal = True, stop.signum
            failure = untrained = None
            log.warning("interrupted: saving a checkpoint at step %d", record.steps)
        result.steps, result.history, result.evaluations = record.steps, record.history, held_out.evaluations
        if sequence.best is not None:
            result.best, result.best_paths = sequence.best.chosen, sequence.best.paths
        result.comparison = held_out.comparison()
        if result.comparison is not None:
            result.comparison.write(run_dir)
    checkpoint = result.checkpoint = loop.checkpoint(record.steps)
    no_healthy_step = not streak.healthy_steps and not start_step  # e.g. interrupted before a step trained
    if (
        stop.requested and not result.interrupted
    ):  # came while the run finished: it stops here, resumable, still without "final"
        result.interrupted, result.stop_signal = True, stop.signum
    if not result.interrupted and failure is None and not untrained and not no_healthy_step:
        result.sampler_paths = models.save_for_sampler("final")
    records = read_metrics(run_dir)
    write_reward_plot(run_dir, records)
    result.reward_plot_path = write_reward_png(run_dir, records)
    result.report_path = write_report(run_dir)
    if failure is not None:
        then = f"continue with `sparring train --resume {run_dir}`" if result.steps < total_steps else "run it again"
        raise EpisodesFailingError(
            f"{failure}. Checkpoint saved at {checkpoint}, no final adapter written; fix the workflow and {then}"
        )
    if untrained:
        raise NothingTrainedError(
            f"{signal.failure(result.steps)}. Checkpoint saved at {checkpoint}, no final adapter written; "
            f"for a deliberate dry run set {OPT_OUT}"
        )
    return result


async def run_debug_episodes(
    config: TuneConfig, workflow=None, judge=None, num_tasks: int = 2, split: str = "train"
) -> list[Episode]:
    """Run `num_tasks` episodes (one per task) with no training: what `sparring run` shows."""
    run = resolve_run(config, workflow, judge, run_dir=Path(config.run_dir or "runs/debug"))
    tasks = (run.eval_tasks if split == "eval" else run.train_tasks)[:num_tasks]
    return await run_episodes(
        run.episode_fn, tasks, run.models.make_tuner, run.settings, run.judge, seed=config.algorithm.seed
    )


async def run_evaluation(config: TuneConfig, workflow=None, judge=None, limit: int | None = None) -> Comparison:
    """Evaluate the configured models (e.g. `model.adapter_path` set to a trained adapter) and each baseline on the
    eval tasks.

    The model's column is 'trained' when a trainable model starts from an adapter, else 'untrained'. Every episode
    samples from `algorithm.seed` and its index (and the engine's stream for raw sampler calls restarts from it), so
    evaluations in one process (several adapters compared, a benchmark's A/B) play the same games as each would alone.
    """
    run = resolve_run(config, workflow, judge, run_dir=Path(config.run_dir or "runs/eval"), evaluation=True)
    run.models.reseed(config.algorithm.seed, 0)
    chosen = run.eval_tasks[:limit] if limit else run.eval_tasks
    label = "trained" if any(m.adapter_path for m in config.trainable_models().values()) else "untrained"
    with ConsoleProgress(enabled=config.logging.console) as progress:
        model = await evaluate_policy(
            run.episode_fn,
            chosen,
            run.models.make_tuner,
            run.settings,
            run.judge,
            label,
            "model",
            None,
            config.algorithm.seed,
            progress,
        )
        baselines = await evaluate_baselines(
            run.episode_fn, chosen, run.models, run.settings, run.judge, run.baselines, config.algorithm.seed, progress
        )
    return Comparison([model, *baselines], subject=label)


RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoints")
"""What a training run writes first: a folder holding one of these is a sparring run."""


def claim_run_folder(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Make `run_dir` ready for a new run (or check it for a resumed one); ConfigError when that would mix runs."""
    if resume:
        if overwrite:
            raise ConfigError("give resume (continue the run) or overwrite (replace it), not both")
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(
                f"resume: {run_dir} holds no run to continue (no config.yaml there); give the folder a "
                "training run wrote"
            )
        return
    if not any((run_dir / marker).exists() for marker in RUN_MARKERS):
        return  # new, empty, or other files only (e.g. `sparring eval`'s eval.json): no run to mix with
    if not overwrite:
        raise ConfigError(
            f"run_dir: {run_dir} already holds a run; continue it with --resume {run_dir} (tune(resume=...)), "
            f"replace it with --overwrite (tune(overwrite=True)), or choose another run_dir"
        )
    shutil.rmtree(run_dir)
