"""Run resolution: the one step from a validated `TuneConfig` to everything a run needs.

A config names things by string -- the workflow, judge and baselines by
import path, the tasks by file, the models by path and backend, where
episodes run by `runner:` -- and `tune()` may hand the workflow and
judge over as objects instead. `resolve_run` turns all of that into a
`ResolvedRun` once, in the order that fails cheapest first: the workflow's
signature (and, with the Ray runner, that it pickles and that the cluster
answers) before any data loads, the tasks before any model is located, every
model's path or name, device and adapter before anything is written or
loaded. Every such failure is a `ConfigError` (or `DatasetError`), one line
that starts with the config field it is about -- so is a local model or
adapter that is there but does not load -- and a run directory this
resolution created is removed again when a model then fails to load.
Training, debug episodes (`sparring run`) and evaluation (`sparring eval`)
all start here, so they cannot disagree about what a config means.

The models' part, checked and then built, is `models_from_config.py`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..rollout import RunnerSettings, ScriptedPolicy, WorkflowSignatureError, as_episode_fn
from ..rollout.workflow import EpisodeFn
from ..runners import make_player
from .config import TuneConfig
from .config_file import dump_config
from .config_names import check_names
from .dataset import TaskStream, load_section, load_train_and_eval_tasks
from .imports import import_field, import_object
from .models import TrainingModels
from .models_from_config import build_models, check_models
from .schema import ConfigError
from .step_hooks import StepHook, build_step_hooks
from .workflow_args import WorkflowArgs, check_config_args, check_task_args, declared_args


class WorkflowError(ConfigError, TypeError):
    """The workflow or judge cannot be used: not importable, not callable, or its signature does not fit."""


@dataclass
class ResolvedRun:
    """A config made runnable: what the loop, the debug runner and the evaluation work with."""

    config: TuneConfig
    """The validated config it was resolved from."""
    episode_fn: EpisodeFn
    """The workflow as `episode_fn(task, tuner)`, its signature checked."""
    judge: Callable | None
    """Scores an episode whose workflow returns no reward; None when the workflow rewards itself."""
    baselines: dict[str, ScriptedPolicy]
    """The configured scripted baseline policies by name."""
    settings: RunnerSettings
    """How episodes run: group size, concurrency, timeout, error reward, in this process or on Ray."""
    train_tasks: list[dict]
    """The training tasks, prepared (task_id, workflow_args merged)."""
    eval_tasks: list[dict]
    """The held-out tasks: the eval dataset, or the part of the training set held out for evaluation."""
    validation_tasks: list[dict]
    """The tasks that choose the adapter kept as `best` (`validation:`); empty unless resolved for training with one."""
    stream: TaskStream | None
    """The training tasks as one batch per step (resumable); None unless resolved for training."""
    models: TrainingModels
    """The trainable and auxiliary models, loaded."""
    step_hooks: list[StepHook]
    """The config's step hooks, built (those given in Python are added by `run_training`)."""


def resolve_run(
    config: TuneConfig,
    workflow=None,
    judge=None,
    *,
    run_dir: Path,
    training: bool = False,
    evaluation: bool = False,
    write_config: bool = False,
    checked: Callable[[], None] | None = None,
) -> ResolvedRun:
    """Import, load and build everything `config` names; `workflow`/`judge` objects take the place of its import paths.

    For `training`, episodes run `algorithm.group_size` per task and the
    training tasks come as a stream of batches; otherwise (evaluation, debug
    episodes) one per task; for `evaluation` there must be eval tasks. With
    `write_config` the config is saved as `run_dir/config.yaml` once
    everything but loading the models has been checked; the folders that
    writing it created are removed if loading fails. `checked` runs once
    everything but loading the models has been checked, before anything is
    written (the run-folder check: a config error is reported first).
    """
    check_names(config)  # the loss, estimator, devices, baselines and hooks the config names: imported, checked
    episode_fn, judge, args_record = _workflow_and_judge(config, workflow, judge)
    algorithm, runner = config.algorithm, config.runner
    player = make_player(runner, episode_fn)  # an unpicklable workflow or an unreachable cluster fails here, first
    group_size = algorithm.group_size if training else 1
    settings = RunnerSettings(group_size, runner.max_concurrency, runner.episode_timeout_s, runner.error_reward, player)
    baselines = {name: import_object(path) for name, path in config.baselines.items()}  # checked by check_names
    if config.train_dataset is None:
        raise ConfigError(
            "train_dataset: not set; give a dataset (path: a .jsonl/.json/.csv/.parquet file or directory, "
            "or tasks: a list of dicts)"
        )
    train_tasks, eval_tasks = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    if evaluation and not eval_tasks:
        raise ConfigError("eval_dataset: no eval tasks; set eval_dataset, or train_dataset.eval_fraction above 0")
    stream = TaskStream.from_config(config.train_dataset, algorithm.batch_size, tasks=train_tasks) if training else None
    validation_tasks = (
        load_section("validation.dataset", config.validation.dataset) if training and config.validation else []
    )
    if args_record is not None:  # each task's own workflow_args, merged over the config's, fit the record too
        check_task_args(args_record, train_tasks, "train_dataset")
        check_task_args(args_record, eval_tasks, "eval_dataset")
        check_task_args(args_record, validation_tasks, "validation.dataset")
    check_models(config)
    if checked is not None:
        checked()
    created = (
        next((folder for folder in reversed([run_dir, *run_dir.parents]) if not folder.exists()), None)
        if write_config
        else None
    )
    try:
        if write_config:
            dump_config(config, run_dir / "config.yaml")
        models = build_models(config, run_dir, training)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return ResolvedRun(
        config,
        episode_fn,
        judge,
        baselines,
        settings,
        train_tasks,
        eval_tasks,
        validation_tasks,
        stream,
        models,
        build_step_hooks(config.step_hooks),
    )


def _workflow_and_judge(
    config: TuneConfig, workflow: Any, judge: Any
) -> tuple[EpisodeFn, Callable | None, type[WorkflowArgs] | None]:
    """The workflow as a checked episode function, the judge (the objects given, else imported from the config) and
    the workflow's `WorkflowArgs` record (None when it declares none), the config's `workflow_args` checked against
    it."""
    if workflow is None:
        if not config.workflow:
            raise WorkflowError(
                "workflow: not set; give its import path (workflow: package.module:function or "
                "path/to/file.py:Class) or pass it to tune()"
            )
        workflow = import_field("workflow", config.workflow, WorkflowError)
    if judge is None and config.judge:
        judge = import_field("judge", config.judge, WorkflowError)
    if judge is not None and not callable(judge):
        raise WorkflowError(
            f"judge: {config.judge or judge!r} is a {type(judge).__name__}, not a function that scores an episode"
        )
    try:
        episode_fn = as_episode_fn(workflow)  # a bad signature fails here, before any data or model loads
    except WorkflowSignatureError as error:
        raise WorkflowError(f"workflow: {error}") from None
    record = declared_args(workflow)
    if record is not None:
        check_config_args(config, record)
    return episode_fn, judge, record
