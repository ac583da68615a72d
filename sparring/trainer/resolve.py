"""Run resolution: the one step from a validated `TuneConfig` to everything a run needs.

A config names things by string -- the workflow, judge and baselines by
import path, the tasks by file, the models by path and backend, where
episodes run by `algorithm.runner` -- and `tune()` may hand the workflow and
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

`build_models` is the models' part: one service per backend (a local engine
per device and dtype, one Tinker-protocol session per URL and key), a LoRA
training client per trainable model, a frozen chat model per auxiliary one,
each snapshot opponent taken from its source adapter, and the league's pool
(`league.py`) when the config has one.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..clients import SamplingClient, ServiceClient, TrainingClient
from ..engine import EngineConfig
from ..models import ModelNotInstalledError, UnknownModelError, parse_device, resolve_model
from ..rollout import ChatModel, FrozenChatModel, OpenAIChatModel, PolicyChatModel, RunnerSettings, ScriptedPolicy, WorkflowSignatureError, as_episode_fn
from ..rollout.workflow import EpisodeFn
from ..runners import make_player
from .config import TuneConfig, TunerModelConfig
from .config_file import dump_config
from .dataset import TaskStream, load_train_and_eval_tasks
from .imports import import_object
from .league import League
from .models import Snapshot, TrainingModels
from .schema import ConfigError
from .step_hooks import StepHook, build_step_hooks


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
    stream: TaskStream | None
    """The training tasks as one batch per step (resumable); None unless resolved for training."""
    models: TrainingModels
    """The trainable and auxiliary models, loaded."""
    step_hooks: list[StepHook]
    """The config's step hooks, built (those given in Python are added by `run_training`)."""


def resolve_run(config: TuneConfig, workflow=None, judge=None, *, run_dir: Path, training: bool = False, evaluation: bool = False, write_config: bool = False) -> ResolvedRun:
    """Import, load and build everything `config` names; `workflow`/`judge` objects take the place of its import paths.

    For `training`, episodes run `algorithm.group_size` per task and the
    training tasks come as a stream of batches; otherwise (evaluation, debug
    episodes) one per task; for `evaluation` there must be eval tasks. With
    `write_config` the config is saved as `run_dir/config.yaml` once
    everything but loading the models has been checked; the folders that
    writing it created are removed if loading fails.
    """
    episode_fn, judge = _workflow_and_judge(config, workflow, judge)
    algorithm = config.algorithm
    player = make_player(algorithm, episode_fn)  # an unpicklable workflow or an unreachable cluster fails here, before any data loads
    group_size = algorithm.group_size if training else 1
    settings = RunnerSettings(group_size, algorithm.max_concurrency, algorithm.episode_timeout_s, algorithm.error_reward, player)
    baselines = {name: import_object(path) for name, path in config.baselines.items()}  # paths checked by the config
    if config.train_dataset is None:
        raise ConfigError("train_dataset: not set; give a dataset (path: a .jsonl/.json/.csv/.parquet file or directory, or tasks: a list of dicts)")
    train_tasks, eval_tasks = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    if evaluation and not eval_tasks:
        raise ConfigError("eval_dataset: no eval tasks; set eval_dataset, or train_dataset.eval_fraction above 0")
    stream = TaskStream.from_config(config.train_dataset, algorithm.batch_size, tasks=train_tasks) if training else None
    check_models(config)
    created = next((folder for folder in reversed([run_dir, *run_dir.parents]) if not folder.exists()), None) if write_config else None
    try:
        if write_config:
            dump_config(config, run_dir / "config.yaml")
        models = build_models(config, run_dir)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return ResolvedRun(config, episode_fn, judge, baselines, settings, train_tasks, eval_tasks, stream, models, build_step_hooks(config.step_hooks))


def _workflow_and_judge(config: TuneConfig, workflow: Any, judge: Any) -> tuple[EpisodeFn, Callable | None]:
    """The workflow as a checked episode function and the judge: the objects given, else imported from the config."""
    if workflow is None:
        if not config.workflow:
            raise WorkflowError("workflow: not set; give its import path (workflow: package.module:function or path/to/file.py:Class) or pass it to tune()")
        workflow = _import_field("workflow", config.workflow)
    if judge is None and config.judge:
        judge = _import_field("judge", config.judge)
    if judge is not None and not callable(judge):
        raise WorkflowError(f"judge: {config.judge or judge!r} is a {type(judge).__name__}, not a function that scores an episode")
    try:
        return as_episode_fn(workflow), judge  # a bad signature fails here, before any data or model loads
    except WorkflowSignatureError as error:
        raise WorkflowError(f"workflow: {error}") from None


def _import_field(field: str, import_path: str) -> Any:
    try:
        return import_object(import_path)
    except ConfigError as error:
        raise WorkflowError(f"{field}: {error}") from None


def check_models(config: TuneConfig) -> None:
    """Every local model the run uses exists (catalogue name or path), its device is on this machine, its adapter is a folder.

    Nothing is loaded; a failure is a ConfigError naming the model's field (``models.pro.model_path: ...``).
    """
    used = {("model" if config.models is None else f"models.{name}"): model for name, model in config.trainable_models().items()}
    used.update({f"auxiliary_models.{name}": model for name, model in config.auxiliary_models.items()})
    for field, model in used.items():
        if model.backend != "local" or model.is_remote or model.snapshot_of is not None:
            continue  # a service's models, and a snapshot's source, are checked where they live
        try:
            resolve_model(model.model_path)
        except (UnknownModelError, ModelNotInstalledError) as error:
            raise ConfigError(f"{field}.model_path: {error}") from None
        try:
            parse_device(model.device)
        except ValueError as error:  # its message starts with "device: "
            raise ConfigError(f"{field}.{error}") from None
        if model.adapter_path is not None and not Path(model.adapter_path).is_dir():
            raise ConfigError(f"{field}.adapter_path: no folder {model.adapter_path!r}; give a saved adapter (a run's sampler_weights/... or checkpoints/... folder)")


def build_models(config: TuneConfig, run_dir: Path) -> TrainingModels:
    """The trainable models (with `adapter_path` loaded), the base-model sampler for the KL penalty, the auxiliary models."""
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
            engine_config = EngineConfig(device=model.device, dtype=model.dtype, prefix_cache_mib=model.prefix_cache_mib)
            services[key] = ServiceClient(base_dir=run_dir / "checkpoints", engine_config=engine_config)
        return services[key]

    clients, policies = {}, {}
    for index, (key, model) in enumerate(trainable.items()):
        field = "model" if config.models is None else f"models.{key}"
        with _loads(f"{field}.model_path", model):
            client = service_for(model).create_lora_training_client(model.model_path, rank=model.lora_rank, seed=config.algorithm.seed + index)
        _check_context(field, model, client)
        if model.adapter_path:
            with _loads(f"{field}.adapter_path", model):
                client.load_weights(model.adapter_path).result()
        clients[key] = client
        policies[key] = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults=model.sampling_params(), model_key=key)
    first = next(iter(trainable.values()))
    base_sampler = service_for(first).create_sampling_client(base_model=first.model_path) if config.algorithm.kl_coef > 0 else None
    auxiliary: dict[str, ChatModel] = {}
    snapshots: dict[str, Snapshot] = {}
    for name, model in config.auxiliary_models.items():
        if model.is_remote:
            auxiliary[name] = OpenAIChatModel(model=model.model_path, base_url=model.base_url, api_key=model.api_key or "EMPTY", defaults=model.sampling_params(), agent=name)
            continue
        if model.snapshot_of is not None:
            snapshots[name] = Snapshot(source=model.snapshot_of, interval=model.snapshot_interval_steps, config=model)
            # Taken now, unsaved, so debug and eval runs have one; training retakes it, saved, at its first step.
            sampler = clients[model.snapshot_of].save_weights_and_get_sampling_client(kind="snapshot")
        elif model.adapter_path:
            with _loads(f"auxiliary_models.{name}.adapter_path", model):
                sampler = service_for(model).create_sampling_client(model_path=model.adapter_path, base_model=model.model_path)
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
    return TrainingModels(clients, policies, auxiliary, base_sampler, snapshots, league, config.algorithm.rollout_temperature_floor)


def _check_context(field: str, model: TunerModelConfig, client: object) -> None:
    """A `max_model_len` beyond the context of the local model it names is a config error (a service checks its own)."""
    if model.max_model_len is None or not isinstance(client, (TrainingClient, SamplingClient)):
        return
    context = client.engine.max_context
    if model.max_model_len > context:
        raise ConfigError(f"{field}.max_model_len: {model.max_model_len} is beyond the context of {model.model_path!r}, {context} tokens; use {context} or less, or leave it unset")


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
