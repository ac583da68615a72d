"""The state behind the Tinker wire protocol: sessions, training models, samplers.

`TinkerService` maps the SDK's objects onto sparring's in-process API on one
engine (one base model, which clients may name by any of its served names:
`serve --model NAME=SOURCE`, so a recipe asking for `Qwen/Qwen3.5-9B` gets
the model the operator put behind that name):

- a session (`create_session`) groups what one `tinker.ServiceClient` made;
  it lives while the SDK heartbeats, and finishing or abandoning it releases
  its adapters;
- a training model `<session>:train:<n>` (the SDK builds that id itself) is a
  sparring `TrainingClient` behind a `ModelLane` (requests in `seq_id` order);
- a sampling session `sample-<random>` is a sparring `SamplingClient` on a
  snapshot, the live adapter, saved sampler weights, or the base model (a
  `sampling.Sampler`; what one sample request does is `sampling`'s).

Every request that does work returns a request id from the `FutureStore`.
Bad input found while decoding a request is a `WireError` (HTTP 4xx); what
sparring itself rejects (a datum of the wrong length, an unknown loss)
becomes that request's error result, so one client's bad request never
touches another's model. sparring's TrainingClient writes checkpoints under
`<base_dir>/<model_id>/`; the service sets each client's `model_id` to the
wire model's weights key, so `tinker://` paths map onto those directories.

Isolation: the protocol names a session only when something is created in
it; every later request names just the model, sampler or request it acts
on. So those ids are the credentials: the session id is a random 128-bit
token, a model id embeds it (the SDK builds `<session>:train:<n>` itself),
and everything else a session is handed is a random token that reveals no
other id: sampler ids, request ids, and checkpoint paths (named by the
model's random weights key, never its id, so a path handed around grants
reading those weights and nothing else). An id nobody was handed is a 404,
and the end of a session (finished, or silent for `session_idle_s`)
releases its models and samplers and cancels its unfinished requests.
Every request is bounded by `ServerLimits` (and the model's context) before
any work is queued.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...clients import SamplingClient, ServiceClient, TrainingClient
from ...models import resolve_model
from ..limits import LimitExceeded, ServerLimits
from . import wire
from .checkpoints import CheckpointStore, adapter_dir, check_name, lora_shape
from .futures import FutureStore
from .lanes import ModelLane, remember_recent
from .sampling import Sampler, check_sample, sample_request
from .wire import WireError

logger = logging.getLogger(__name__)


@dataclass
class _Model:
    """A training model as the wire sees it."""

    lane: ModelLane
    """Its requests, in order; `lane.client` resolves to the TrainingClient."""
    session_id: str
    """The owning session."""
    served_name: str
    """The base model's name as the client asked for it (what `get_info` answers)."""
    rank: int
    """LoRA rank."""
    weights_key: str
    """Directory of its checkpoints under the base dir (the first part of their tinker:// paths); not its id."""
    creation_request: str = ""
    """Request id of its creation (answered again to a retried create)."""
    snapshots: deque = field(default_factory=deque)
    """Ids of its snapshot samplers, oldest first (the oldest are released past the cap)."""


@dataclass
class _Session:
    """What one SDK ServiceClient created."""

    last_seen: float
    """Monotonic time of the last heartbeat or request."""
    heartbeat_at: float | None = None
    """Monotonic time of the last heartbeat; None for a client that never sends them."""
    models: list[str] = field(default_factory=list)
    """Its training model ids."""
    samplers: list[str] = field(default_factory=list)
    """Its sampling session ids."""
    sampler_ids: dict[int, str] = field(default_factory=dict)
    """sampling_session_seq_id -> sampler id (a retried create gets the same sampler)."""


class TinkerService:
    """Sessions, training models and samplers of one served base model."""

    def __init__(
        self,
        base_model: str,
        service: ServiceClient,
        store: FutureStore,
        *,
        served_names: Sequence[str] = (),
        limits: ServerLimits | None = None,
        gap_s: float = 120.0,
        max_snapshots_per_model: int = 8,
        session_idle_s: float = 3600.0,
        abandon_s: float = 120.0,
    ):
        self.base_model = base_model
        self.service = service
        self.store = store
        self.limits = limits or ServerLimits()
        self.checkpoints = CheckpointStore(service.base_dir)
        self.gap_s = gap_s
        self.max_snapshots_per_model = max_snapshots_per_model
        self.session_idle_s = session_idle_s
        self.abandon_s = abandon_s
        self.base_sampler = service.create_sampling_client(base_model=base_model)  # loads the model now
        self.engine = self.base_sampler.engine
        self.served_names = list(dict.fromkeys([*served_names] or [base_model]))
        self.names = {base_model, self.engine.model_spec.name, *self.served_names}
        self.sessions: dict[str, _Session] = {}
        self.models: dict[str, _Model] = {}
        self.samplers: dict[str, Sampler] = {}

    # Lookups ----------------------------------------------------------------------

    def check_base_model(self, name: str | None) -> str:
        """The served name a request's `base_model` stands for (the first served name when it gives none)."""
        if name is None:
            return self.served_names[0]
        if name in self.names:
            return name
        try:
            if resolve_model(name).path == self.engine.model_spec.path:
                self.names.add(name)
                return name
        except (ValueError, RuntimeError):
            pass
        raise WireError(
            400, f"base_model {name!r} is not served here; this server serves {', '.join(map(repr, self.served_names))}"
        )

    def session(self, session_id: str) -> _Session:
        self.sweep()
        session = self.sessions.get(session_id)
        if session is None:
            raise WireError(
                404, f"unknown session_id {session_id!r} (the server may have restarted; create a new ServiceClient)"
            )
        session.last_seen = time.monotonic()
        return session

    def model(self, model_id: str) -> _Model:
        return self._owned(self.models, model_id, "model_id")

    def sampler(self, sampler_id: str) -> Sampler:
        return self._owned(self.samplers, sampler_id, "sampling_session_id")

    def _owned(self, table: dict, key: str, field_name: str):
        """table[key], whose session counts as active; 404 naming the field if there is none."""
        item = table.get(key)
        if item is None:
            raise WireError(404, f"unknown {field_name} {key!r}")
        self.session(item.session_id)
        return item

    # Sessions -------------------------------------------------------------------------

    def create_session(self, request: wire.CreateSessionRequest) -> dict:
        session_id = secrets.token_hex(16)
        self.sessions[session_id] = _Session(last_seen=time.monotonic())
        logger.info("session %s created (sdk %s)", session_id, request.sdk_version)
        return {"type": "create_session", "session_id": session_id}

    def finish_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        for model_id in session.models:
            self._release_model(model_id)
        for sampler_id in session.samplers:
            self.samplers.pop(sampler_id, None)
        cancelled = self.store.cancel_owned(session_id)
        logger.info(
            "session %s finished; %d models released, %d unfinished requests cancelled",
            session_id,
            len(session.models),
            cancelled,
        )

    def heartbeat(self, session_id: str) -> None:
        self.session(session_id).heartbeat_at = time.monotonic()

    def sweep(self) -> None:
        """Release sessions silent for `session_idle_s`; cancel the requests of heartbeating clients gone quiet for
        `abandon_s`.

        The SDK heartbeats every 10 s and calls a session lost after 120 s without one: its process is gone, and
        nobody will fetch what it asked for. (A client that never heartbeats is judged by `session_idle_s` alone.)
        """
        now = time.monotonic()
        for session_id, session in list(self.sessions.items()):
            if now - session.last_seen > self.session_idle_s:
                logger.warning("session %s sent nothing for %.0f s; releasing it", session_id, now - session.last_seen)
                self.finish_session(session_id)
            elif session.heartbeat_at is not None and now - session.heartbeat_at > self.abandon_s:
                silent, session.heartbeat_at = now - session.heartbeat_at, None
                cancelled = self.store.cancel_owned(session_id)
                logger.warning(
                    "session %s sent no heartbeat for %.0f s; %d unfinished requests cancelled",
                    session_id,
                    silent,
                    cancelled,
                )

    # Training models -------------------------------------------------------------------

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
        session: _Session,
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
        model = _Model(
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
            creation.result().engine.release(creation.result().adapter)

        model.lane.client.add_done_callback(drop)  # also once a model still being created is ready

    def _local(self, tinker_path: str) -> Path:
        try:
            return self.checkpoints.local(tinker_path)
        except FileNotFoundError as error:
            raise WireError(404, str(error)) from None
        except ValueError as error:
            raise WireError(400, str(error)) from None

    # Sampling -------------------------------------------------------------------------------

    def _add_sampler(self, sampler_id: str, sampler: Sampler) -> None:
        self.samplers[sampler_id] = sampler
        session = self.sessions.get(sampler.session_id)
        if session is not None:
            session.samplers.append(sampler_id)

    async def create_sampling_session(self, request: wire.CreateSamplingSessionRequest) -> dict:
        session = self.session(request.session_id)
        sampler_id = session.sampler_ids.get(request.sampling_session_seq_id)
        if sampler_id not in self.samplers:
            sampler_id = f"sample-{secrets.token_hex(16)}"
            served_name = self.check_base_model(request.base_model)
            if request.model_path is not None:
                path = adapter_dir(self._local(request.model_path))
                try:
                    client = await asyncio.to_thread(self.service.create_sampling_client, str(path), self.base_model)
                except (FileNotFoundError, ValueError) as error:
                    raise WireError(400, f"cannot sample from {request.model_path}: {error}") from None
            else:
                client = self.base_sampler
            self._add_sampler(
                sampler_id,
                Sampler(
                    client=client, session_id=request.session_id, served_name=served_name, model_path=request.model_path
                ),
            )
            session.sampler_ids[request.sampling_session_seq_id] = sampler_id
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    def saved_adapter(self, tinker_path: str) -> Path:
        """The PEFT directory of a checkpoint saved through this server (how the OpenAI API serves it by path)."""
        return adapter_dir(self.checkpoints.local(tinker_path))

    def sampling_client(self, sampler_id: str) -> SamplingClient | None:
        """The sampler of a sampling session id, or None (how the OpenAI API finds them by `model` name)."""
        sampler = self.samplers.get(sampler_id)
        return sampler.client if sampler is not None else None

    def get_sampler(self, sampler_id: str) -> dict:
        sampler = self.sampler(sampler_id)
        return {"sampler_id": sampler_id, "base_model": sampler.served_name, "model_path": sampler.model_path}

    def sample(self, request: wire.SampleRequest) -> dict:
        request.check_served()
        if request.sampling_session_id is None:
            raise WireError(
                400, "invalid SampleRequest: sampling_session_id is required (create one with create_sampling_session)"
            )
        sampler = self.sampler(request.sampling_session_id)
        if request.seq_id is not None and request.seq_id in sampler.request_ids:
            request_id = sampler.request_ids[request.seq_id]
        else:
            try:
                check_sample(request, self.engine, self.limits)
            except LimitExceeded as error:
                raise WireError(400, str(error)) from None
            request_id = self.store.start(sample_request(sampler.client, request), "Sample", owner=sampler.session_id)
            if request.seq_id is not None:
                remember_recent(sampler.request_ids, request.seq_id, request_id)
        return {
            "request_id": request_id,
            "sample_sequence_ids": [f"{request_id}:{index}" for index in range(request.num_samples)],
        }
