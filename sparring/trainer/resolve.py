"""Run resolution: the one step from a validated `TuneConfig` to everything a run needs, its models built included.

A config names things by string -- the workflow, judge and baselines by import path, the tasks by file, the models by
path and backend, where episodes run by `runner:` -- and `tune()` may hand the workflow and judge over as objects
instead. `resolve_run` turns all of that into a `ResolvedRun` once, in the order that fails cheapest first: the
workflow's signature and the names the config gives (`config_file.check_names`; and, with the Ray runner, that the
workflow pickles and that the cluster answers) before any data loads, the tasks -- and the warm start's examples, read
and batched here -- before any model is located, every model's path or name, device and adapter before anything is
written or loaded. A resumed run's latest checkpoint is read (`checkpoints.saved_trainer_state`: its manifest and data
position checked) and its task stream built at the saved data position here too, before any model loads; the models'
weights, optimizer and RNGs are restored from it by `restore_checkpoint` once they are built. Every such failure is a
`ConfigError` (or `DatasetError`), one line that starts with the config field it is about -- so is a local model or
adapter that is there but does not load; a damaged checkpoint is a `CheckpointError` naming the bad file -- and a run
directory this resolution created is removed again when a model then fails to load. Training, debug episodes
(`sparring run`) and evaluation (`sparring eval`) all start here, so they cannot disagree about what a config means.

The models' part, checked without loading anything and then built: `config.check_models` finds every local model
the config names (a catalogue name or a path), its device and its adapter folder before anything is written or
loaded, so a typo fails in a second with the field it is about. `build_models` then makes them: one service per
backend (a local engine per device, dtype and prefix-cache budget, one Tinker-protocol session per URL and key), a
LoRA training client per trainable model, a frozen chat model per auxiliary one, each snapshot opponent taken from
its source adapter, and the league's pool (`League`, `models.py`) when the config has one. A model that is there but
does not load is a `ConfigError` naming its field, on one line. Last, `build_step_hooks` builds the config's step
hooks (`step_hooks:`, import paths checked by `check_names`): a class with no arguments, an object as it is.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..clients import SamplingClient, ServiceClient, TrainingClient
from ..engine import EngineConfig, saved_rank
from ..rollout import (
    ChatModel,
    FrozenChatModel,
    OpenAIChatModel,
    PolicyChatModel,
    RunnerSettings,
    ScriptedPolicy,
)
from ..rollout.workflow import EpisodeFn
from ..runners import make_player
from .checkpoints import SavedCheckpoint, latest_checkpoint, saved_trainer_state
from .config import TuneConfig, TunerModelConfig, check_config_args, check_models, dump_config
from .config_file import check_names, import_object, import_step_hook, import_workflow
from .dataset import TaskStream, load_section, load_train_and_eval_tasks
from .models import League, Snapshot, TrainingModels
from .safeguards import CheckpointError, one_line
from .schema import ConfigError, check_task_args
from .step import StepHook


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
    """The training tasks, one batch per step, from a resumed run's saved data position; None unless training."""
    resumed_from: SavedCheckpoint | None
    """A resumed run's latest checkpoint, its manifest and data position checked here; None for a new run."""
    warm_start_examples: list[dict]
    """The warm start's examples, read with the tasks so a bad file fails before any model loads; empty if none."""
    warm_start_batches: TaskStream | None
    """The warm start's steps as batches of row indices into its examples; None unless a new run warm-starts."""
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
    resume: bool = False,
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
    written (the run-folder check: a config error is reported first). To
    `resume` training, the run's latest checkpoint has its manifest and data
    position checked, and the task stream is built at that position.
    """
    episode_fn, judge, args_record = import_workflow(config, workflow, judge)  # its signature checked
    check_names(config)  # the loss, estimator, devices, baselines and hooks the config names: imported, checked
    if args_record is not None:  # the config's workflow_args fit the workflow's record
        check_config_args(config, args_record)
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
    checkpoint = _resumed_from(run_dir) if training and resume else None
    saved = SavedCheckpoint(checkpoint, saved_trainer_state(checkpoint)) if checkpoint is not None else None
    position = saved.state["data"] if saved is not None else None
    stream = None
    try:
        if training:
            stream = TaskStream.from_config(config.train_dataset, algorithm.batch_size, train_tasks, position)
    except ValueError as error:  # DatasetError too: another dataset than the run's
        if checkpoint is None:
            raise
        raise CheckpointError(f"{checkpoint / 'trainer_state.json'}: {one_line(error)}") from None
    validation_tasks = (
        load_section("validation.dataset", config.validation.dataset) if training and config.validation else []
    )
    warm_start = config.warm_start if training and checkpoint is None else None  # a checkpoint holds its result
    examples = load_section("warm_start.dataset", warm_start.dataset) if warm_start is not None else []
    warm_start_batches = (
        TaskStream(
            [{"row": index} for index in range(len(examples))],
            warm_start.batch_size,
            total_steps=warm_start.steps,
            shuffle=warm_start.dataset.shuffle,
            seed=warm_start.dataset.seed,
        )
        if warm_start is not None
        else None
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
        saved,
        examples,
        warm_start_batches,
        models,
        build_step_hooks(config.step_hooks),
    )


def _resumed_from(run_dir: Path) -> Path | None:
    """The latest checkpoint of the run in `run_dir`; None without one, or when the folder holds no run (the
    run-folder check, `checked`, then says so as a config error)."""
    try:
        return latest_checkpoint(run_dir)
    except FileNotFoundError:
        return None


def build_models(config: TuneConfig, run_dir: Path, training: bool = True) -> TrainingModels:
    """The trainable models (with `adapter_path` loaded), the base-model sampler for the KL penalty, the auxiliary
    models.
    Where nothing trains (evaluation, debug episodes) a local `adapter_path` is loaded at its own LoRA rank, whatever
    the config's `lora_rank`."""
    trainable = config.trainable_models()
    services: dict[tuple, ServiceClient] = {}

    def service_for(model: TunerModelConfig) -> ServiceClient:
        if model.backend == "tinker":
            key = ("tinker", model.service_url(), model.service_api_key())
            if key not in services:
                services[key] = ServiceClient(base_url=model.service_url(), api_key=model.service_api_key())
            return services[key]
        key = ("local", model.device, model.dtype, model.prefix_cache_mib)
        if key not in services:
            engine_config = EngineConfig(
                device=model.device, dtype=model.dtype, prefix_cache_mib=model.prefix_cache_mib
            )
            services[key] = ServiceClient(base_dir=run_dir / "checkpoints", engine_config=engine_config)
        return services[key]

    clients, policies = {}, {}
    for index, (key, model) in enumerate(trainable.items()):
        field = "model" if config.models is None else f"models.{key}"
        rank = model.lora_rank
        if model.adapter_path and not training and model.backend == "local":
            with _loads(f"{field}.adapter_path", model):
                rank = saved_rank(model.adapter_path)
        with _loads(f"{field}.model_path", model):
            client = service_for(model).create_lora_training_client(
                model.model_path, rank=rank, seed=config.algorithm.seed + index
            )
        _check_context(field, model, client)
        if model.adapter_path:
            with _loads(f"{field}.adapter_path", model):
                client.load_weights(model.adapter_path).result()
        clients[key] = client
        policies[key] = PolicyChatModel(
            client.save_weights_and_get_sampling_client(kind="inflight"),
            defaults=model.sampling_params(),
            model_key=key,
        )
    first = next(iter(trainable.values()))
    base_sampler = (
        service_for(first).create_sampling_client(base_model=first.model_path) if config.algorithm.kl_coef > 0 else None
    )
    auxiliary: dict[str, ChatModel] = {}
    snapshots: dict[str, Snapshot] = {}
    for name, model in config.auxiliary_models.items():
        if model.is_remote:
            auxiliary[name] = OpenAIChatModel(
                model=model.model_path,
                base_url=model.base_url,
                api_key=model.api_key or "EMPTY",
                defaults=model.sampling_params(),
                agent=name,
            )
            continue
        if model.snapshot_of is not None:
            snapshots[name] = Snapshot(source=model.snapshot_of, interval=model.snapshot_interval_steps, config=model)
            # Taken now, unsaved, so debug and eval runs have one; training retakes it, saved, at its first step.
            sampler = clients[model.snapshot_of].save_weights_and_get_sampling_client(kind="snapshot")
        elif model.adapter_path:
            with _loads(f"auxiliary_models.{name}.adapter_path", model):
                sampler = service_for(model).create_sampling_client(
                    model_path=model.adapter_path, base_model=model.model_path
                )
        else:
            with _loads(f"auxiliary_models.{name}.model_path", model):
                sampler = service_for(model).create_sampling_client(base_model=model.model_path)
        _check_context(f"auxiliary_models.{name}", model, sampler)
        auxiliary[name] = FrozenChatModel(sampler, defaults=model.sampling_params(), agent=name)
    league = None
    if config.league is not None:
        learner = config.league_learner()
        frozen = {name: auxiliary[name] for name in config.league.models}
        league = League(config.league, clients[learner], trainable[learner].sampling_params(), frozen)
    algorithm = config.algorithm
    return TrainingModels(
        clients,
        policies,
        auxiliary,
        base_sampler,
        snapshots,
        league,
        algorithm.rollout_temperature_floor,
        algorithm.exploration,
    )


def build_step_hooks(import_paths: list[str]) -> list[StepHook]:
    """The config's hooks, built: a class is instantiated with no arguments, an object is used as it is."""
    hooks = [import_step_hook(f"step_hooks[{index}]", path) for index, path in enumerate(import_paths)]
    return [hook() if isinstance(hook, type) else hook for hook in hooks]


def _check_context(field: str, model: TunerModelConfig, client: object) -> None:
    """A `max_model_len` beyond the context of the local model it names is a config error (a service checks its own)."""
    if model.max_model_len is None or not isinstance(client, (TrainingClient, SamplingClient)):
        return
    context = client.engine.max_context
    if model.max_model_len > context:
        raise ConfigError(
            f"{field}.max_model_len: {model.max_model_len} is beyond the context of {model.model_path!r}, "
            f"{context} tokens; use {context} or less, or leave it unset"
        )


@contextmanager
def _loads(field: str, model: TunerModelConfig) -> Iterator[None]:
    """A local model or adapter that is there but does not load is a config error naming `field`, on one line."""
    try:
        yield
    except (OSError, ValueError) as error:
        if model.backend != "local" or isinstance(error, ConfigError):
            raise
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        raise ConfigError(f"{field}: {getattr(model, field.rpartition('.')[2])!r} does not load: {reason}") from error
