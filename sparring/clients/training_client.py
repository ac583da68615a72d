"""`TrainingClient`: one LoRA adapter on a shared base model, trained by calls.

Every method submits its work to the engine and returns at once with a
future; calls on one client run in the order they were made. Several
clients on one base model are several adapters on one engine, each with its
own optimizer. Checkpoints live under the service's `base_dir`, at
`<base_dir>/<model_id>/weights/<name>` (training state) and
`<base_dir>/<model_id>/sampler_weights/<name>` (PEFT adapter), and these
paths are what the `path` of each response holds.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

from ..engine import Engine
from ..engine import operations as ops
from ..types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    GetInfoResponse,
    LoadWeightsResponse,
    ModelData,
    OptimStepResponse,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
)
from .futures import APIFuture, AsyncTrainingSpellings, ReadyClient
from .sampling_client import SamplingClient

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"checkpoint name {name!r} must be letters, digits, '.', '_' or '-' (no slashes)")
    return name


class TrainingClient(AsyncTrainingSpellings, ReadyClient):
    """Trains one LoRA adapter."""

    def __init__(self, engine: Engine, adapter: str, base_model: str, rank: int, base_dir: Path):
        self.engine = engine
        self.adapter = adapter
        self.base_model = base_model
        self.rank = rank
        self.model_id = adapter
        self.base_dir = Path(base_dir)

    # Training ---------------------------------------------------------------

    def forward(
        self, data: list[Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        return self._call(ops.forward_backward, data, loss_fn, loss_fn_config, False)

    def forward_backward(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict | None = None,
        *,
        untrained_logprobs: bool = True,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Tinker's forward_backward. `untrained_logprobs=False` (sparring's own; a remote service may ignore it) skips
        the LM head at the positions where the loss has no gradient (advantage or weight 0: prompts, other agents'
        turns): their logprobs come back NaN, their loss 0. The trainer reads logprobs at trained tokens only and asks
        for it."""
        return self._call(ops.forward_backward, data, loss_fn, loss_fn_config, True, untrained_logprobs)

    def optim_step(self, adam_params: AdamParams | None = None) -> APIFuture[OptimStepResponse]:
        params = adam_params or AdamParams()
        if not isinstance(params, AdamParams):
            raise TypeError(f"optim_step takes types.AdamParams, got {type(params).__name__}")
        return self._call(ops.optim_step, params)

    # Checkpoints ------------------------------------------------------------

    def save_state(self, name: str) -> APIFuture[SaveWeightsResponse]:
        path = self.base_dir / self.model_id / "weights" / check_name(name)
        metadata = {"base_model": self.base_model}
        return self._call(ops.save_state, path, metadata).then(lambda p: SaveWeightsResponse(path=str(p)))

    def load_state(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Load adapter weights and, when the checkpoint has it, optimizer state."""
        return self._call(ops.load_state, Path(path), True).then(lambda _: LoadWeightsResponse(path=str(path)))

    def load_state_with_optimizer(self, path: str) -> APIFuture[LoadWeightsResponse]:
        return self.load_state(path)

    def load_weights(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Load adapter weights only; the optimizer starts fresh."""
        return self._call(ops.load_state, Path(path), False).then(lambda _: LoadWeightsResponse(path=str(path)))

    def save_weights_for_sampler(self, name: str) -> APIFuture[SaveWeightsForSamplerResponse]:
        path = self.base_dir / self.model_id / "sampler_weights" / check_name(name)
        return self._call(ops.save_for_sampler, path).then(lambda p: SaveWeightsForSamplerResponse(path=str(p)))

    # Sampling ---------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self, name: str | None = None, kind: Literal["snapshot", "inflight"] = "snapshot"
    ) -> SamplingClient:
        """A sampler on the current weights: a frozen in-memory copy ('snapshot') or this live adapter ('inflight')."""
        return self._sampling_client(name, kind).result()

    async def save_weights_and_get_sampling_client_async(
        self, name: str | None = None, kind: Literal["snapshot", "inflight"] = "snapshot"
    ) -> SamplingClient:
        return await self._sampling_client(name, kind)

    def _sampling_client(self, name: str | None, kind: str) -> APIFuture[SamplingClient]:
        if kind == "inflight":
            return APIFuture.completed(SamplingClient(self.engine, self.adapter, self.base_model))
        if kind != "snapshot":
            raise ValueError(f"kind must be 'snapshot' or 'inflight', got {kind!r}")
        if name is not None:
            self.save_weights_for_sampler(name)
        snapshot = self.engine.new_name(f"{self.adapter}-snapshot")
        taken = APIFuture(self.engine.call(lambda: self.engine.bank.snapshot(self.adapter, snapshot)))
        return taken.then(lambda _: SamplingClient(self.engine, snapshot, self.base_model, owns_adapter=True))

    def create_sampling_client(self, model_path: str) -> SamplingClient:
        return load_sampling_client(self.engine, model_path, self.base_model)

    def release(self) -> Future:
        """Delete this adapter and its optimizer state from the shared engine, after the work submitted before it.

        The engine is one per base model and process, so an adapter lives until it is released: whoever ends a
        client's use (a finished run, an ended server session) releases it; the client is unusable afterwards."""
        return self.engine.release(self.adapter)

    # Info -------------------------------------------------------------------

    def reseed(self, seed: int) -> None:
        """Restart the engine's seed stream for sampling requests that carry no seed."""
        self.engine.reseed(seed)

    def get_tokenizer(self):
        return self.engine.tokenizer

    def get_renderer(self):
        """The chat renderer of the base model (messages <-> tokens)."""
        return self.engine.loaded.renderer

    def get_info(self) -> GetInfoResponse:
        config = self.engine.loaded.model.config
        return GetInfoResponse(
            model_data=ModelData(
                arch=getattr(config, "model_type", None),
                model_name=self.base_model,
                tokenizer_id=str(self.engine.loaded.spec.path),
            ),
            model_id=self.model_id,
            is_lora=True,
            lora_rank=self.rank,
            model_name=self.base_model,
        )

    def _call(self, operation, *args) -> APIFuture:
        return APIFuture(self.engine.call(lambda: operation(self.engine, self.adapter, *args)))


def load_sampling_client(engine: Engine, model_path: str, base_model: str) -> SamplingClient:
    """A frozen sampler on PEFT weights saved by save_weights_for_sampler (or any PEFT adapter dir)."""
    path = Path(model_path)
    if not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{model_path} is not a saved sampler checkpoint (no adapter_config.json)")
    name = engine.new_name("sampler")
    engine.call(lambda: engine.bank.load(name, path, trainable=False)).result()
    return SamplingClient(engine, name, base_model, owns_adapter=True)
