"""`RemoteTrainingClient`: sparring's training interface on a Tinker-protocol service.

It wraps one `tinker.TrainingClient` (a LoRA model on the service) and has
the methods, arguments and result types of the local `TrainingClient`, so
the RL loop, checkpoints and snapshots run unchanged on either. Calls are
submitted at once and return sparring `APIFuture`s; the SDK numbers each
request, and the service runs one model's requests in that order.

How the local notions map onto the service:

- `save_weights_and_get_sampling_client(kind="inflight")` is one live
  `RemoteSamplingClient` per training client. After every `optim_step` the
  client publishes the new weights (an in-flight save, queued right behind
  the step) and swaps the new sampling session in; the step's future
  completes only then, so rollouts started after an update sample from it.
- `kind="snapshot"` is a sampling session on a frozen copy of the weights.
- `save_state` / `save_weights_for_sampler` return the service's paths
  (`tinker://...`); `load_state` (weights + optimizer) and `load_weights`
  create a new model on the service from such a path and use it from then
  on (the SDK's supported way; the replaced model is freed with the session).
- `reseed` seeds the requests that carry no seed (see `SeedStream`).
"""

from __future__ import annotations

from typing import Any, Literal

from ...types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    GetInfoResponse,
    LoadWeightsResponse,
    OptimStepResponse,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
)
from ..futures import APIFuture, AsyncTrainingSpellings, ReadyClient
from ..training_client import check_name
from .convert import as_future, from_tinker_forward_backward, from_tinker_info, to_tinker_adam, to_tinker_datum
from .sampling import RemoteSamplingClient, base_model_text


class RemoteTrainingClient(AsyncTrainingSpellings, ReadyClient):
    """Trains one LoRA adapter that lives on a Tinker-protocol service."""

    def __init__(self, service: Any, client: Any, base_model: str, rank: int):
        self.service = service
        """The `RemoteServiceClient` that made this client (not imported here: it imports this module)."""
        self.tinker_client = client
        """The SDK's training client (replaced by load_state / load_weights)."""
        self.base_model = base_model
        self.rank = rank
        self.model_id = str(client.model_id)
        self._inflight: RemoteSamplingClient | None = None

    # Training ---------------------------------------------------------------

    def forward(
        self, data: list[Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        submitted = self.tinker_client.forward([to_tinker_datum(d) for d in data], loss_fn, loss_fn_config)
        return APIFuture(as_future(submitted)).then(from_tinker_forward_backward)

    def forward_backward(
        self,
        data: list[Datum],
        loss_fn: str = "cross_entropy",
        loss_fn_config: dict | None = None,
        *,
        untrained_logprobs: bool = True,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Tinker's forward_backward on the service. `untrained_logprobs=False` lets a client skip positions without
        gradient (`TrainingClient`); the service reports them all the same."""
        submitted = self.tinker_client.forward_backward([to_tinker_datum(d) for d in data], loss_fn, loss_fn_config)
        return APIFuture(as_future(submitted)).then(from_tinker_forward_backward)

    def optim_step(self, adam_params: AdamParams | None = None) -> APIFuture[OptimStepResponse]:
        submitted = self.tinker_client.optim_step(to_tinker_adam(adam_params or AdamParams()))
        stepped = APIFuture(as_future(submitted)).then(
            lambda response: OptimStepResponse(metrics=dict(response.metrics or {}))
        )
        if self._inflight is None:
            return stepped
        return stepped.join(self._publish(), lambda response, _: response)

    def _publish(self) -> APIFuture[RemoteSamplingClient]:
        """Publish the weights as they are after everything submitted so far, and point the live sampler at them."""
        live = self._inflight
        published = APIFuture(as_future(self.tinker_client.save_weights_and_get_sampling_client(kind="inflight")))
        return published.then(live.swap)

    # Checkpoints ------------------------------------------------------------

    def save_state(self, name: str) -> APIFuture[SaveWeightsResponse]:
        submitted = self.tinker_client.save_state(check_name(name))
        return APIFuture(as_future(submitted)).then(lambda response: SaveWeightsResponse(path=response.path))

    def load_state(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Continue from a save_state checkpoint: weights and optimizer state. Blocks until the service has the new
        model."""
        return self._reload(path, with_optimizer=True)

    def load_state_with_optimizer(self, path: str) -> APIFuture[LoadWeightsResponse]:
        return self.load_state(path)

    def load_weights(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Continue from a checkpoint's weights with a fresh optimizer. Blocks until the service has the new model."""
        return self._reload(path, with_optimizer=False)

    def _reload(self, path: str, with_optimizer: bool) -> APIFuture[LoadWeightsResponse]:
        # Blocking keeps the order of calls: everything submitted after this goes to the new model.
        self.tinker_client = self.service.create_tinker_client_from_state(path, with_optimizer)
        self.model_id = str(self.tinker_client.model_id)
        if self._inflight is not None:
            self._publish().result()
        return APIFuture.completed(LoadWeightsResponse(path=str(path)))

    def save_weights_for_sampler(self, name: str) -> APIFuture[SaveWeightsForSamplerResponse]:
        submitted = self.tinker_client.save_weights_for_sampler(check_name(name))
        return APIFuture(as_future(submitted)).then(lambda response: SaveWeightsForSamplerResponse(path=response.path))

    # Sampling ---------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self, name: str | None = None, kind: Literal["snapshot", "inflight"] = "snapshot"
    ) -> RemoteSamplingClient:
        """A sampler on the current weights: a frozen copy ('snapshot') or this model's live weights ('inflight')."""
        return self._sampling_client(name, kind).result()

    async def save_weights_and_get_sampling_client_async(
        self, name: str | None = None, kind: Literal["snapshot", "inflight"] = "snapshot"
    ) -> RemoteSamplingClient:
        return await self._sampling_client(name, kind)

    def _sampling_client(self, name: str | None, kind: str) -> APIFuture[RemoteSamplingClient]:
        if kind not in ("snapshot", "inflight"):
            raise ValueError(f"kind must be 'snapshot' or 'inflight', got {kind!r}")
        if kind == "inflight" and self._inflight is not None:
            return APIFuture.completed(self._inflight)
        if name is not None:
            self.save_weights_for_sampler(name)
        submitted = self.tinker_client.save_weights_and_get_sampling_client(kind=kind)
        sampler = APIFuture(as_future(submitted)).then(
            lambda client: RemoteSamplingClient(client, self.base_model, self.service.seeds, live=kind == "inflight")
        )
        if kind == "snapshot":
            return sampler

        def keep(live: RemoteSamplingClient) -> RemoteSamplingClient:
            if self._inflight is None:
                self._inflight = live
            return self._inflight

        return sampler.then(keep)

    def create_sampling_client(self, model_path: str) -> RemoteSamplingClient:
        """A frozen sampler on weights saved by save_weights_for_sampler (a path on the service)."""
        return self.service.create_sampling_client(model_path=model_path, base_model=self.base_model)

    # Info -------------------------------------------------------------------

    def reseed(self, seed: int) -> None:
        """Restart the seed stream of this service's requests that carry no seed."""
        self.service.seeds.reseed(seed)

    def get_tokenizer(self):
        return base_model_text(self.base_model)[0]

    def get_renderer(self):
        """The chat renderer of the base model (messages <-> tokens), loaded locally."""
        return base_model_text(self.base_model)[1]

    def get_info(self) -> GetInfoResponse:
        return from_tinker_info(self.tinker_client.get_info(), self.base_model, self.rank)
