"""Run resolution: the one step from a validated `TuneConfig` to everything a run needs.

A config names things by string -- the workflow, judge and baselines by
import path, the tasks by file, the models by path and backend, where
episodes run by `algorithm.runner` -- and `tune()` may hand the workflow and
judge over as objects instead. `resolve_run` turns all of that into a
`ResolvedRun` once, in the order that fails cheapest first: the workflow's
signature (and, with the Ray runner, that it pickles and that the cluster
answers) before any data loads, the tasks before any model loads. Training,
debug episodes (`sparring run`) and evaluation (`sparring eval`) all start
here, so they cannot disagree about what a config means.

`build_models` is the models' part: one service per backend (a local engine
per device and dtype, one Tinker-protocol session per URL and key), a LoRA
training client per trainable model, a frozen chat model per auxiliary one,
and each snapshot opponent taken from its source adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..clients import ServiceClient
from ..engine import EngineConfig
from ..rollout import ChatModel, FrozenChatModel, OpenAIChatModel, PolicyChatModel, RunnerSettings, ScriptedPolicy, as_episode_fn
from ..rollout.player import EpisodePlayer, play_in_process
from ..rollout.workflow import EpisodeFn
from .config import TuneConfig, TunerModelConfig
from .config_file import dump_config
from .dataset import TaskStream, load_train_and_eval_tasks
from .imports import import_object
from .models import Snapshot, TrainingModels


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


def resolve_run(config: TuneConfig, workflow=None, judge=None, *, run_dir: Path, training: bool = False, write_config: bool = False) -> ResolvedRun:
    """Import, load and build everything `config` names; `workflow`/`judge` objects take the place of its import paths.

    For `training`, episodes run `algorithm.group_size` per task and the
    training tasks come as a stream of batches; otherwise (evaluation, debug
    episodes) one per task. With `write_config` the config is saved as
    `run_dir/config.yaml` once the workflow has been checked.
    """
    if workflow is None:
        if not config.workflow:
            raise ValueError("no workflow given: pass it to tune() or set `workflow: module:attr` in the config")
        workflow = import_object(config.workflow)
    if judge is None and config.judge:
        judge = import_object(config.judge)
    episode_fn = as_episode_fn(workflow)  # a bad signature fails here, before any model loads
    algorithm = config.algorithm
    player: EpisodePlayer = play_in_process
    if algorithm.runner == "ray":
        from ..integrations.ray_runner import check_sendable, ray_runner

        check_sendable(episode_fn)  # an unpicklable workflow fails here, before any model loads
        player = ray_runner(algorithm.ray_address, algorithm.ray_num_cpus).play  # so does an unreachable cluster
    group_size = algorithm.group_size if training else 1
    settings = RunnerSettings(group_size, algorithm.max_concurrency, algorithm.episode_timeout_s, algorithm.error_reward, player)
    baselines = {name: import_object(path) for name, path in config.baselines.items()}  # paths checked by the config
    if write_config:
        dump_config(config, run_dir / "config.yaml")
    if config.train_dataset is None:
        raise ValueError("train_dataset is not set: give DatasetConfig(path=...) or a list of tasks")
    train_tasks, eval_tasks = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    stream = TaskStream.from_config(config.train_dataset, algorithm.batch_size, tasks=train_tasks) if training else None
    models = build_models(config, run_dir)
    return ResolvedRun(config, episode_fn, judge, baselines, settings, train_tasks, eval_tasks, stream, models)


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
        key = ("local", model.device, model.dtype)
        if key not in services:
            services[key] = ServiceClient(base_dir=run_dir / "checkpoints", engine_config=EngineConfig(device=model.device, dtype=model.dtype))
        return services[key]

    clients, policies = {}, {}
    for index, (key, model) in enumerate(trainable.items()):
        client = service_for(model).create_lora_training_client(model.model_path, rank=model.lora_rank, seed=config.algorithm.seed + index)
        if model.adapter_path:
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
            sampler = service_for(model).create_sampling_client(model_path=model.adapter_path, base_model=model.model_path)
        else:
            sampler = service_for(model).create_sampling_client(base_model=model.model_path)
        auxiliary[name] = FrozenChatModel(sampler, defaults=model.sampling_params(), agent=name)
    return TrainingModels(clients, policies, auxiliary, base_sampler, snapshots)
