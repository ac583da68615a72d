"""`ServiceClient`: the entry point that hands out training and sampling clients.

It mirrors `tinker.ServiceClient`, but runs everything in this process on the
local engine: `create_lora_training_client(base_model, rank)` adds a LoRA
adapter to the (shared) engine of that base model. The `base_model` is a
catalogue name (`smollm2-135m-instruct`), a local Hugging Face model
directory, or a `.gguf` file. Device and dtype come from `EngineConfig`.

`ServiceClient(base_url=..., api_key=...)` hands out clients on a remote
Tinker-protocol service instead (`remote.RemoteServiceClient`, through
the `tinker` SDK): the same methods, arguments and result types, so code
written for the local API scales out by changing the constructor call.
"""

from __future__ import annotations

from pathlib import Path

from ..engine import EngineConfig, get_engine
from ..engine import operations as ops
from ..engine.export import base_model_name
from ..models import sparring_home
from .remote import RemoteServiceClient
from .sampling_client import SamplingClient
from .training_client import TrainingClient, load_sampling_client

DEFAULT_BASE_MODEL = "smollm2-135m-instruct"


class ServiceClient:
    """Creates training and sampling clients on local engines, or on a remote service when given its base_url."""

    def __init__(
        self,
        base_dir: str | Path | None = None,
        engine_config: EngineConfig | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        **engine_options,
    ):
        if base_url is not None and (engine_config is not None or engine_options):
            raise ValueError(
                "ServiceClient(base_url=...) trains on a remote service, which picks its own device and "
                "dtype; drop engine_config / engine options"
            )
        self.base_dir = Path(base_dir) if base_dir is not None else sparring_home() / "checkpoints"
        self.engine_config = engine_config or EngineConfig(**engine_options)
        self.remote = RemoteServiceClient(base_url, api_key) if base_url is not None else None
        """The remote service every call goes to, when base_url was given (None: local engines)."""

    def create_lora_training_client(
        self,
        base_model: str = DEFAULT_BASE_MODEL,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> TrainingClient:
        """A new LoRA adapter on `base_model` (loaded once per process and shared)."""
        if self.remote is not None:
            return self.remote.create_lora_training_client(
                base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata
            )
        engine = get_engine(base_model, self.engine_config)
        adapter = engine.call(
            lambda: ops.create_adapter(engine, rank, seed, train_attn, train_mlp, train_unembed)
        ).result()
        return TrainingClient(engine, adapter, base_model, rank, self.base_dir)

    async def create_lora_training_client_async(
        self, base_model: str = DEFAULT_BASE_MODEL, rank: int = 32, seed: int | None = None, **options
    ) -> TrainingClient:
        return self.create_lora_training_client(base_model, rank, seed, **options)

    def create_training_client_from_state(
        self, path: str, base_model: str = DEFAULT_BASE_MODEL, with_optimizer: bool = False
    ) -> TrainingClient:
        """A training client resumed from a save_state checkpoint (weights; optimizer too when asked)."""
        if self.remote is not None:
            return self.remote.create_training_client_from_state(path, None, with_optimizer)
        state = ops.read_state(Path(path))
        client = self.create_lora_training_client(state.get("base_model", base_model), rank=state["rank"])
        (client.load_state(path) if with_optimizer else client.load_weights(path)).result()
        return client

    def create_training_client_from_state_with_optimizer(
        self, path: str, base_model: str = DEFAULT_BASE_MODEL
    ) -> TrainingClient:
        return self.create_training_client_from_state(path, base_model, with_optimizer=True)

    def create_sampling_client(self, model_path: str | None = None, base_model: str | None = None) -> SamplingClient:
        """Sample from saved sampler weights (model_path) or from the plain base model."""
        if self.remote is not None:
            return self.remote.create_sampling_client(model_path, base_model)
        if model_path is None and base_model is None:
            raise ValueError("create_sampling_client needs model_path or base_model")
        engine = get_engine(base_model or _base_model_of(model_path), self.engine_config)
        if model_path is None:
            return SamplingClient(engine, None, base_model)
        return load_sampling_client(engine, model_path, base_model or _base_model_of(model_path))

    async def create_sampling_client_async(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> SamplingClient:
        return self.create_sampling_client(model_path, base_model)


def _base_model_of(model_path: str) -> str:
    """The base model a saved adapter was trained on: as sparring named it, else from its PEFT config."""
    if not (Path(model_path) / "adapter_config.json").exists():
        raise FileNotFoundError(f"{model_path} is not a saved sampler checkpoint (no adapter_config.json)")
    return base_model_name(Path(model_path))
