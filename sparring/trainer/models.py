"""The models of one training run: trainable policies and frozen auxiliary models.

`TrainingModels` creates one LoRA training client per trainable model (all on
one shared engine when they share a base model), the chat models that
workflows call (`PolicyChatModel` on each live adapter, frozen local or
OpenAI-compatible models for the auxiliary ones), and applies one update:
`forward_backward` for every model first, then every `optim_step`, so the
engine runs them back to back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import EngineConfig
from ..rollout import ChatModel, FrozenChatModel, OpenAIChatModel, PolicyChatModel, TunerHandle
from ..training import SamplingClient, ServiceClient, TrainingClient
from ..types import Datum
from .config import AlgorithmConfig, TuneConfig, TunerModelConfig


@dataclass
class TrainingModels:
    """Trainable clients, the chat models handed to workflows, and the base-model sampler."""

    clients: dict[str, TrainingClient]
    """Training client per trainable model key."""
    policies: dict[str, PolicyChatModel]
    """Chat model on each live adapter, per key."""
    auxiliary: dict[str, ChatModel] = field(default_factory=dict)
    """Frozen models by config name."""
    base_sampler: SamplingClient | None = None
    """The first trainable model's base model, for the KL penalty."""

    @property
    def tokenizer(self):
        return next(iter(self.clients.values())).get_tokenizer()

    def make_tuner(self) -> TunerHandle:
        return TunerHandle(policies=self.policies, auxiliary_models=self.auxiliary)

    def reseed(self, seed: int, step: int) -> None:
        for client in self.clients.values():
            client.engine.reseed(seed * 1_000_003 + step)

    async def update(self, datums: dict[str, list[Datum]], algorithm: AlgorithmConfig) -> dict[str, float]:
        """One optimizer step for every model that has data."""
        keys = [key for key in self.clients if datums.get(key)]
        passes = [self.clients[key].forward_backward(datums[key], algorithm.loss_fn, algorithm.loss_fn_config or None) for key in keys]
        steps = [self.clients[key].optim_step(algorithm.adam_params()) for key in keys]
        metrics: dict[str, float] = {}
        for key, output, step in zip(keys, await asyncio.gather(*passes), await asyncio.gather(*steps)):
            prefix = "train" if len(self.clients) == 1 else f"train/{key}"
            metrics[f"{prefix}/loss"] = output.loss
            metrics[f"{prefix}/grad_norm"] = step.metrics["grad_norm"]
            metrics[f"{prefix}/datums"] = float(len(datums[key]))
        return metrics

    def save_for_sampler(self, name: str) -> dict[str, str]:
        futures = {key: client.save_weights_for_sampler(name) for key, client in self.clients.items()}
        return {key: future.result().path for key, future in futures.items()}


def build_models(config: TuneConfig, run_dir: Path) -> TrainingModels:
    trainable = config.trainable_models()
    services: dict[tuple, ServiceClient] = {}

    def service_for(model: TunerModelConfig) -> ServiceClient:
        key = (model.device, model.dtype)
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
    auxiliary = {name: _frozen_model(name, model, service_for(model)) for name, model in config.auxiliary_models.items()}
    first = next(iter(trainable.values()))
    base_sampler = service_for(first).create_sampling_client(base_model=first.model_path) if config.algorithm.kl_coef > 0 else None
    return TrainingModels(clients, policies, auxiliary, base_sampler)


def _frozen_model(name: str, model: TunerModelConfig, service: ServiceClient) -> ChatModel:
    if model.base_url:
        return OpenAIChatModel(model=model.model_path, base_url=model.base_url, api_key=model.api_key or "EMPTY", defaults=model.sampling_params(), agent=name)
    if model.adapter_path:
        sampler = service.create_sampling_client(model_path=model.adapter_path, base_model=model.model_path)
    else:
        sampler = service.create_sampling_client(base_model=model.model_path)
    return FrozenChatModel(sampler, defaults=model.sampling_params(), agent=name)
