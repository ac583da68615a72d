"""`RemoteServiceClient`: training and sampling clients on any Tinker-protocol service.

The service is reached with the real `tinker` SDK (`tinker.ServiceClient`),
so anything that speaks the protocol works: Thinking Machines' Tinker, other
implementations of it, or `sparring serve` on a GPU box. It hands out
`RemoteTrainingClient`s and `RemoteSamplingClient`s, which have the local
clients' methods and types; `sparring.clients.ServiceClient(base_url=...)`
delegates to it, so code written for the local API scales out unchanged.

The base model is named as the service knows it (for `sparring serve`, the
`--model` it was started with); its tokenizer and chat renderer are loaded
locally from that name (see `base_model_text`). One `SeedStream` per service
seeds the requests that carry no seed, like the local engine's.
"""

from __future__ import annotations

from typing import Any, Literal

from .convert import as_future, tinker_sdk
from .sampling import RemoteSamplingClient, SeedStream
from .training import RemoteTrainingClient


class RemoteServiceClient:
    """Creates training and sampling clients on one Tinker-protocol service (one SDK session)."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, user_metadata: dict[str, str] | None = None
    ):
        self.base_url = base_url
        """The service's URL; None means the SDK's default (TINKER_BASE_URL, then Tinker's own API)."""
        self.tinker = tinker_sdk().ServiceClient(user_metadata=user_metadata, base_url=base_url, api_key=api_key)
        """The SDK's service client; its session lives until `close` (or the process ends)."""
        self.seeds = SeedStream()
        """Seeds for this service's sampling requests that carry none."""

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> RemoteTrainingClient:
        """A new LoRA model on the service (blocks until the service has created it)."""
        created = self.tinker.create_lora_training_client(
            base_model=base_model,
            rank=rank,
            seed=seed,
            train_mlp=train_mlp,
            train_attn=train_attn,
            train_unembed=train_unembed,
            user_metadata=user_metadata,
        )
        return RemoteTrainingClient(self, as_future(created).result(), base_model, rank)

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, seed: int | None = None, **options
    ) -> RemoteTrainingClient:
        return self.create_lora_training_client(base_model, rank, seed, **options)

    def create_tinker_client_from_state(self, path: str, with_optimizer: bool) -> Any:
        """The SDK's training client for a new model loaded from a save_state path (blocks until it exists)."""
        create = (
            self.tinker.create_training_client_from_state_with_optimizer
            if with_optimizer
            else self.tinker.create_training_client_from_state
        )
        return as_future(create(path)).result()

    def create_training_client_from_state(
        self, path: str, base_model: str | None = None, with_optimizer: bool = False
    ) -> RemoteTrainingClient:
        """A training client resumed from a save_state checkpoint on the service (weights; optimizer too when asked)."""
        client = self.create_tinker_client_from_state(path, with_optimizer)
        info = client.get_info()
        return RemoteTrainingClient(self, client, base_model or info.model_data.model_name, int(info.lora_rank or 0))

    def create_training_client_from_state_with_optimizer(
        self, path: str, base_model: str | None = None
    ) -> RemoteTrainingClient:
        return self.create_training_client_from_state(path, base_model, with_optimizer=True)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> RemoteSamplingClient:
        """Sample from weights saved on the service (model_path) or from the plain base model."""
        if model_path is None and base_model is None:
            raise ValueError("create_sampling_client needs model_path or base_model")
        sampler = as_future(self.tinker.create_sampling_client(model_path=model_path, base_model=base_model)).result()
        return RemoteSamplingClient(sampler, base_model or sampler.get_base_model(), self.seeds)

    async def create_sampling_client_async(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> RemoteSamplingClient:
        return self.create_sampling_client(model_path, base_model)

    def close(self, status: Literal["success", "errored", "interrupted"] = "success") -> None:
        """End the SDK session: the service frees its models and sampling sessions (saved checkpoints stay)."""
        as_future(self.tinker.close(status)).result()
