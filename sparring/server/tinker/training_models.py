"""Training models of the Tinker wire protocol: LoRA adapters the SDK trains, one request at a time.

A training model `<session>:train:<n>` (the SDK builds that id itself) is a sparring `TrainingClient` behind a
`ModelLane` (requests in `seq_id` order): `TrainingModel` is its record (in sessions.py, beside the session that owns
it), `TrainingModels` the part of `TinkerService`
that creates, trains, saves, loads and releases them. sparring's TrainingClient writes checkpoints under
`<base_dir>/<model_id>/`; each client's `model_id` is set to the wire model's random weights key, so `tinker://`
paths map onto those directories and a path handed around grants reading those weights and nothing else. What
sparring itself rejects (a datum of the wrong length, an unknown loss) becomes that request's error result, so one
client's bad request never touches another's model.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...clients import SamplingClient, ServiceClient, TrainingClient
from ...engine import Engine
from ..limits import LimitExceeded, ServerLimits
from . import wire
from .checkpoints import CheckpointStore, check_name, lora_shape
from .futures import FutureStore
from .lanes import ModelLane
from .sampling import Sampler
from .sessions import Session, TrainingModel
from .wire import WireError


class TrainingModels:
    """The training-models part of `TinkerService`: it reads the state `TinkerService.__init__` sets (annotated
    below) and finds sessions and models through `Sessions`' lookups."""

    base_model: str
    served_names: list[str]
    service: ServiceClient
    engine: Engine
    store: FutureStore
    limits: ServerLimits
    checkpoints: CheckpointStore
    gap_s: float
    max_snapshots_per_model: int
    models: dict[str, TrainingModel]
    samplers: dict[str, Sampler]

    def create_model(self, request: wire.CreateModelRequest) -> dict:
        session = self.session(request.session_id)
        served_name = self.check_base_model(request.base_model)
        family = (request.optimizer_config or {}).get("type", "adamw")
        if family != "adamw":
            raise WireError(400, f"optimizer_config.type {family!r} is not served; sparring trains with AdamW")
        lora = request.lora_config or wire.LoraConfig(rank=32)
        if lora.rank > self.limits.max_lora_rank:
            raise WireError(
                400, f"lora_config.rank: {lora.rank} is above this server's limit of {self.limits.max_lora_rank}"
            )
        options = {
            "rank": lora.rank,
            "seed": lora.seed,
            "train_mlp": lora.train_mlp,
            "train_attn": lora.train_attn,
            "train_unembed": lora.train_unembed,
        }
        return self._new_model(
            session, request.session_id, request.model_seq_id, options, None, "CreateModel", served_name
        )

    def create_model_from_checkpoint(self, request: wire.LoadWeightsRequest) -> dict:
        session = self.session(request.session_id)
        if request.model_seq_id is None:
            raise WireError(400, "invalid LoadWeightsRequest: model_seq_id is required with session_id")
        checkpoint = self._local(request.path)
        options = self._lora_shape(checkpoint)
        load = (checkpoint, request.optimizer)
        return self._new_model(
            session, request.session_id, request.model_seq_id, options, load, "LoadWeights", self.served_names[0]
        )

    def _new_model(
        self,
        session: Session,
        session_id: str,
        seq: int,
        options: dict,
        load: tuple | None,
        kind: str,
        served_name: str,
    ) -> dict:
        model_id = f"{session_id}:train:{seq}"  # the SDK builds this id itself (creating a model from a checkpoint)
        if model_id in self.models:  # a retried create
            return {"request_id": self.models[model_id].creation_request, "model_id": model_id}
        weights_key = f"weights-{secrets.token_hex(16)}"

        def create() -> TrainingClient:
            client = self.service.create_lora_training_client(self.base_model, **options)
            client.model_id = weights_key  # checkpoints go to <base_dir>/<weights key>/
            if load is not None:
                path, with_optimizer = load
                (client.load_state(str(path)) if with_optimizer else client.load_weights(str(path))).result()
            return client

        creation = asyncio.ensure_future(asyncio.to_thread(create))
        model = TrainingModel(
            lane=ModelLane(model_id, creation, self.gap_s),
            session_id=session_id,
            served_name=served_name,
            rank=options["rank"],
            weights_key=weights_key,
        )

        async def created() -> dict:
            await creation
            return {"type": "load_weights" if load else "create_model", "model_id": model_id, "path": None}

        model.creation_request = self.store.start(created(), kind, owner=session_id)
        self.models[model_id] = model
        session.models.append(model_id)
        return {"request_id": model.creation_request, "model_id": model_id}

    async def get_info(self, model_id: str) -> dict:
        model = self.model(model_id)
        try:
            await model.lane.client
        except Exception as error:  # noqa: BLE001 - reported to the caller
            raise WireError(404, f"model {model_id!r} could not be created: {error}") from None
        config = self.engine.model_config
        model_data = {
            "arch": getattr(config, "model_type", None),
            "model_name": model.served_name,
            "tokenizer_id": self.engine.model_dir,
        }
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_data": model_data,
            "is_lora": True,
            "lora_rank": model.rank,
            "model_name": model.served_name,
        }

    def sequenced(
        self,
        request: wire.SequencedRequest,
        kind: str,
        start: Callable[[TrainingClient], Any],
        finish: Callable[[Any], Any],
        check: Callable[[], None] | None = None,
    ) -> dict:
        """Queue one per-model request; its result is finish(result of the work start submitted).

        `check` runs first: a ValueError it raises refuses the request (HTTP 400) and gives up its seq_id.
        """
        model = self.model(request.model_id)
        seq_id = request.seq_id
        if seq_id is not None and (earlier := model.lane.request_id(seq_id)) is not None:
            return {"request_id": earlier, "model_id": request.model_id}
        if check is not None:
            try:
                check()
            except ValueError as error:
                model.lane.skip(seq_id)
                raise WireError(400, str(error)) from None

        async def submit(client: TrainingClient) -> Any:
            handle = start(client)
            # A coroutine (taking a snapshot) runs inside the lane, so it sees exactly the requests before it.
            return await handle if inspect.iscoroutine(handle) else handle

        async def work(submitted: asyncio.Future) -> Any:
            handle = await submitted
            return finish(await handle if inspect.isawaitable(handle) else handle)

        request_id = self.store.start(work(model.lane.submit(seq_id, submit)), kind, owner=model.session_id)
        model.lane.remember(seq_id, request_id)
        return {"request_id": request_id, "model_id": request.model_id}

    def reject(self, body: Any) -> None:
        """A per-model request failed validation: give its seq_id up so later ones do not wait for it."""
        if (
            isinstance(body, dict)
            and isinstance(body.get("seq_id"), int)
            and isinstance(body.get("model_id"), str)
            and body["model_id"] in self.models
        ):
            self.models[body["model_id"]].lane.skip(body["seq_id"])

    def forward_backward(self, request: wire.ForwardBackwardRequest, forward_only: bool) -> dict:
        batch = request.forward_backward_input

        def start(client: TrainingClient):
            run = client.forward if forward_only else client.forward_backward
            return run(batch.to_sparring(), batch.loss_fn, batch.config())

        def check() -> None:
            context, total = self.engine.max_context, 0
            for index, datum in enumerate(batch.data):
                length = datum.model_input.token_count()
                if length > context:
                    raise LimitExceeded(
                        f"forward_backward_input.data[{index}].model_input",
                        f"{length} tokens exceed the model's context length of {context}",
                    )
                total += length
            self.limits.check_tokens("forward_backward_input.data", total, f"the {len(batch.data)} datums")

        return self.sequenced(
            request, "Forward" if forward_only else "ForwardBackward", start, lambda output: output, check
        )

    def optim_step(self, request: wire.OptimStepRequest) -> dict:
        finish = lambda response: {"type": "optim_step", "metrics": response.metrics}  # noqa: E731
        return self.sequenced(request, "OptimStep", lambda client: client.optim_step(request.to_sparring()), finish)

    def save_state(self, request: wire.SaveWeightsRequest) -> dict:
        name = request.path or f"state-{request.seq_id or int(time.time())}"
        path = self.checkpoints.tinker_path(self.model(request.model_id).weights_key, "weights", name)
        finish = lambda _: {"type": "save_weights", "path": path}  # noqa: E731
        return self.sequenced(
            request, "SaveWeights", lambda client: client.save_state(name), finish, lambda: check_name("path", name)
        )

    def save_for_sampler(self, request: wire.SaveWeightsForSamplerRequest) -> dict:
        model = self.model(request.model_id)
        if request.path is not None:
            path = self.checkpoints.tinker_path(model.weights_key, "sampler_weights", request.path)
            finish = lambda _: {"type": "save_weights_for_sampler", "path": path, "sampling_session_id": None}  # noqa: E731
            save = lambda client: client.save_weights_for_sampler(request.path)  # noqa: E731
            return self.sequenced(
                request, "SaveWeightsForSampler", save, finish, lambda: check_name("path", request.path)
            )
        sampler_id = f"sample-{secrets.token_hex(16)}"

        async def start(client: TrainingClient) -> SamplingClient:
            return await client.save_weights_and_get_sampling_client_async(kind=request.kind)

        def finish(client: SamplingClient) -> dict:
            self._add_sampler(
                sampler_id, Sampler(client=client, session_id=model.session_id, served_name=model.served_name)
            )
            if request.kind == "snapshot":
                model.snapshots.append(sampler_id)
                while len(model.snapshots) > self.max_snapshots_per_model:
                    self.samplers.pop(model.snapshots.popleft(), None)  # its adapter is freed with the client
            return {"type": "save_weights_for_sampler", "path": None, "sampling_session_id": sampler_id}

        return self.sequenced(request, "SaveWeightsForSampler", start, finish)

    def load_state(self, request: wire.LoadWeightsRequest) -> dict:
        checkpoint = self._local(request.path)
        envelope = wire.SequencedRequest(model_id=request.model_id, seq_id=request.seq_id)
        load = (
            (lambda client: client.load_state(str(checkpoint)))
            if request.optimizer
            else (lambda client: client.load_weights(str(checkpoint)))
        )
        finish = lambda _: {"type": "load_weights", "path": request.path, "model_id": request.model_id}  # noqa: E731
        return self.sequenced(envelope, "LoadWeights", load, finish)

    def unload_model(self, model_id: str) -> dict:
        model = self.model(model_id)
        self._release_model(model_id)

        async def done() -> dict:
            return {"type": "unload_model", "model_id": model_id}

        return {"request_id": self.store.start(done(), "UnloadModel", owner=model.session_id), "model_id": model_id}

    def weights_info(self, tinker_path: str) -> dict:
        shape = self._lora_shape(self._local(tinker_path))
        return {"base_model": self.served_names[0], "is_lora": True, "lora_rank": shape.pop("rank"), **shape}

    def _lora_shape(self, checkpoint: Path) -> dict:
        try:
            return lora_shape(checkpoint, self.engine.linear_groups)
        except (FileNotFoundError, KeyError, ValueError) as error:
            raise WireError(400, f"{checkpoint.name}: not a LoRA checkpoint this server can load ({error})") from None

    def _release_model(self, model_id: str) -> None:
        model = self.models.pop(model_id, None)
        if model is None:
            return
        model.lane.close()
        for sampler_id in model.snapshots:
            self.samplers.pop(sampler_id, None)

        def drop(creation: asyncio.Future) -> None:
            if creation.cancelled() or creation.exception() is not None:
                return
            creation.result().release()

        model.lane.client.add_done_callback(drop)  # also once a model still being created is ready

    def _local(self, tinker_path: str) -> Path:
        try:
            return self.checkpoints.local(tinker_path)
        except FileNotFoundError as error:
            raise WireError(404, str(error)) from None
        except ValueError as error:
            raise WireError(400, str(error)) from None
