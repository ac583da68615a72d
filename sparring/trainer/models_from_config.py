"""The run's models from a config: checked without loading anything, then built.

`check_models` finds every local model the config names (a catalogue name or
a path), its device and its adapter folder before anything is written or
loaded, so a typo fails in a second with the field it is about.
`build_models` then makes them: one service per backend (a local engine per
device, dtype and prefix-cache budget, one Tinker-protocol session per URL
and key), a LoRA training client per trainable model, a frozen chat model per
auxiliary one, each snapshot opponent taken from its source adapter, and the
league's pool (`league.py`) when the config has one. A model that is there
but does not load is a `ConfigError` naming its field, on one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..clients import SamplingClient, ServiceClient, TrainingClient
from ..engine import EngineConfig, saved_rank
from ..models import ModelNotInstalledError, UnknownModelError, parse_device, resolve_model
from ..rollout import ChatModel, FrozenChatModel, OpenAIChatModel, PolicyChatModel
from .config import TuneConfig, TunerModelConfig
from .league import League
from .models import Snapshot, TrainingModels
from .schema import ConfigError


def check_models(config: TuneConfig) -> None:
    """Every local model the run uses exists (catalogue name or path), its device is on this machine, its adapter is
    a folder.

    Nothing is loaded; a failure is a ConfigError naming the model's field (``models.pro.model_path: ...``).
    """
    used = {
        ("model" if config.models is None else f"models.{name}"): model
        for name, model in config.trainable_models().items()
    }
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
            raise ConfigError(
                f"{field}.adapter_path: no folder {model.adapter_path!r}; give a saved adapter (a run's "
                "sampler_weights/... or checkpoints/... folder)"
            )


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
