"""The JSON request bodies of the Tinker wire protocol, and their conversion to sparring types.

Each `*Request` mirrors the request type of the same name in the `tinker`
SDK (`tinker.types`), so the SDK's `model_dump(mode="json")` validates here.
Unknown fields are ignored: newer SDKs add optional fields, and a request
must not fail because of a field it does not need. Fields that would change
the meaning of a request but that sparring does not serve (image chunks,
top-k logprobs, non-Adam optimizers) are rejected with a message naming them.

`parse` validates a body and turns a pydantic error into `WireError` (HTTP
400) whose message names each bad field by its dotted path.

`WireTensorData`, `WireModelInput` and `WireDatum` are the wire forms of
`sparring.types.TensorData`, `ModelInput` and `Datum`, not copies of them:
the SDK may send a tensor as sparse CSR (sparring's are dense), a chunk of a
kind sparring does not serve (it must reach the request's error result with
a message naming the chunk, not fail the schema), and fields sparring's
types forbid. Each converts to its sparring type in its `to_sparring` and
nowhere else. Sampling parameters need no wire form of their own:
`SamplingParams` is sparring's, only tolerant of unknown fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ... import types

M = TypeVar("M", bound=BaseModel)

Id = Annotated[str, Field(max_length=128)]
"""A session, model, sampler or request id, or a checkpoint name: ids this server mints are far shorter."""
PathText = Annotated[str, Field(max_length=1024)]
"""A `tinker://` path or a base model name."""
MAX_STOPS, MAX_STOP_LENGTH = 64, 256


class WireError(Exception):
    """An HTTP error with a JSON body `{"detail": message}`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


def parse(model: type[M], body: Any) -> M:
    """Validate a decoded JSON body as `model`, or raise WireError(400) naming every bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise WireError(400, f"invalid {model.__name__}: {describe(error)}") from None


def describe(error: ValidationError) -> str:
    """'field.path: problem' for each problem, joined with '; ' (FastAPI's RequestValidationError reads the same)."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "body"
        problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


# Sessions and models ---------------------------------------------------------


class ClientConfigRequest(_Wire):
    """Asks for the feature flags that steer the SDK (encodings, auth, chunking)."""

    sdk_version: Id | None = None
    """Version of the calling SDK."""


class CreateSessionRequest(_Wire):
    """Opens a session: the scope of a ServiceClient's training and sampling clients."""

    tags: list[Id] = Field(default_factory=list, max_length=64)
    """Free-form labels."""
    user_metadata: dict[str, Any] | None = None
    """Free-form metadata."""
    sdk_version: Id | None = None
    """Version of the calling SDK (logged)."""


class SessionRequest(_Wire):
    """Names a session (heartbeat)."""

    session_id: Id
    """The session."""


class LoraConfig(_Wire):
    """Which LoRA adapter to create."""

    rank: int = Field(ge=1)
    """LoRA rank."""
    seed: int | None = None
    """Seed for the adapter's initial weights."""
    train_unembed: bool = True
    """Adapt the LM head (the SDK's default is True)."""
    train_mlp: bool = True
    """Adapt the MLP layers."""
    train_attn: bool = True
    """Adapt the attention layers."""


class CreateModelRequest(_Wire):
    """Creates a training model (a LoRA adapter) in a session."""

    session_id: Id
    """The owning session."""
    model_seq_id: int = Field(ge=0)
    """Index of this model in its session; with the session it makes the model id."""
    base_model: PathText
    """Must name the base model this server serves."""
    lora_config: LoraConfig | None = None
    """Adapter shape; None means rank 32 on every layer group."""
    optimizer_config: dict[str, Any] | None = None
    """Optimizer family; only 'adamw' is served."""


class ModelRequest(_Wire):
    """Names a training model (get_info, unload_model)."""

    model_id: Id
    """The model."""


class SequencedRequest(_Wire):
    """The envelope every per-model request shares: the model and its place in the model's order."""

    model_id: Id
    """The model this request acts on."""
    seq_id: int | None = None
    """1, 2, 3, ... per model: requests run in this order whatever order they arrive in."""


# Training ---------------------------------------------------------------------


class WireTensorData(_Wire):
    """A tensor as the SDK sends it: flat data + dtype + shape, optionally sparse CSR; dense `types.TensorData` once
    converted."""

    data: list[int] | list[float]
    """Values, row-major (only the listed values when sparse)."""
    dtype: types.TensorDtype
    """Element type."""
    shape: list[int] | None = None
    """Dense shape; None means 1-D."""
    sparse_crow_indices: list[int] | None = None
    """CSR row pointers, when sparse."""
    sparse_col_indices: list[int] | None = None
    """CSR column indices, when sparse."""

    def to_sparring(self, name: str) -> types.TensorData:
        if self.sparse_crow_indices is None:
            return types.TensorData(data=list(self.data), dtype=self.dtype, shape=self.shape)
        if not self.shape or len(self.shape) != 2 or self.sparse_col_indices is None:
            raise ValueError(f"loss_fn_inputs[{name!r}]: a sparse tensor needs a 2-D shape and sparse_col_indices")
        dense = np.zeros(self.shape, dtype=np.float32 if self.dtype == "float32" else np.int64)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.sparse_crow_indices))
        dense[rows, self.sparse_col_indices] = self.data
        return types.TensorData.from_numpy(dense)


class WireChunk(_Wire):
    """One chunk of a model input; only token chunks are served."""

    type: str = "encoded_text"
    """Chunk kind: 'encoded_text' (others, such as images, are rejected)."""
    tokens: list[int] | None = None
    """Token ids of an encoded_text chunk."""


class WireModelInput(_Wire):
    """A token sequence as chunks of any kind the SDK has; `types.ModelInput` (token chunks only) once converted."""

    chunks: list[WireChunk]
    """The chunks, in order."""

    def token_count(self) -> int:
        return sum(len(chunk.tokens or ()) for chunk in self.chunks)

    def to_sparring(self) -> types.ModelInput:
        for index, chunk in enumerate(self.chunks):
            if chunk.type != "encoded_text" or chunk.tokens is None:
                raise ValueError(
                    f"chunks[{index}]: only encoded_text chunks (token ids) are served, got a {chunk.type!r} chunk"
                )
        return types.ModelInput(chunks=[types.EncodedTextChunk(tokens=chunk.tokens) for chunk in self.chunks])


class WireDatum(_Wire):
    """One training sequence and its loss inputs, in wire forms; a `types.Datum` once converted."""

    model_input: WireModelInput
    """Input tokens."""
    loss_fn_inputs: dict[str, WireTensorData]
    """Loss tensors by name."""

    def to_sparring(self) -> types.Datum:
        inputs = {name: tensor.to_sparring(name) for name, tensor in self.loss_fn_inputs.items()}
        return types.Datum(model_input=self.model_input.to_sparring(), loss_fn_inputs=inputs)


class ForwardBackwardInput(_Wire):
    """A batch and the loss to take on it."""

    data: list[WireDatum]
    """The batch."""
    loss_fn: str
    """A loss the server's process registered (cross_entropy, importance_sampling, ppo, cispo, dro); never an import
    path, since a server imports no module a client names."""
    loss_fn_config: dict[str, float | str] | None = None
    """Loss hyperparameters (clip thresholds, beta)."""

    def to_sparring(self) -> list[types.Datum]:
        data = []
        for index, datum in enumerate(self.data):
            try:
                data.append(datum.to_sparring())
            except (TypeError, ValueError) as error:
                raise ValueError(f"datum {index}: {error}") from None
        return data

    def config(self) -> dict[str, float] | None:
        if not self.loss_fn_config:
            return None
        text = {key: value for key, value in self.loss_fn_config.items() if isinstance(value, str)}
        if text:
            raise ValueError(f"loss_fn_config values must be numbers; got text for {sorted(text)}")
        return dict(self.loss_fn_config)


class ForwardBackwardRequest(SequencedRequest):
    """forward_backward (and, with forward_only, forward) on one model."""

    forward_backward_input: ForwardBackwardInput
    """Batch and loss."""
    forward_only: bool = False
    """Skip the backward pass (set by the protobuf encoding)."""


class ForwardRequest(SequencedRequest):
    """forward on one model (the JSON route of older SDKs)."""

    forward_input: ForwardBackwardInput
    """Batch and loss."""


class OptimStepRequest(SequencedRequest):
    """One optimizer step."""

    adam_params: dict[str, Any] | None = None
    """AdamW hyperparameters (how the SDK sends them)."""
    optim_params: dict[str, Any] | None = None
    """The same, under the newer field name."""
    optimizer_params: dict[str, Any] | None = None
    """Parameters of a non-Adam optimizer family: rejected."""

    def to_sparring(self) -> types.AdamParams:
        if self.optimizer_params is not None:
            family = self.optimizer_params.get("type", "unknown")
            raise ValueError(f"optimizer {family!r} is not served; sparring trains with AdamW (send adam_params)")
        params = dict(self.adam_params if self.adam_params is not None else self.optim_params or {})
        params.pop("type", None)
        try:
            return types.AdamParams(**params)
        except ValidationError as error:
            raise ValueError(f"adam_params: {describe(error)}") from None


class SaveWeightsRequest(SequencedRequest):
    """save_state: adapter + optimizer under a name."""

    path: Id | None = None
    """Checkpoint name (a single path component); None picks one."""


class SaveWeightsForSamplerRequest(SequencedRequest):
    """save_weights_for_sampler (with a name) or a sampling session on the current weights (without)."""

    path: Id | None = None
    """Checkpoint name; None asks for a sampling session instead of a file."""
    sampling_session_seq_id: int | None = None
    """Index of the new sampling session in its session (when path is None)."""
    kind: Literal["snapshot", "inflight"] = "snapshot"
    """A frozen copy of the weights, or the live adapter."""


class LoadWeightsRequest(_Wire):
    """load_state on a model, or (with session_id) a new model created from a checkpoint."""

    model_id: Id | None = None
    """The model to load into (with seq_id)."""
    seq_id: int | None = None
    """Its place in the model's order."""
    session_id: Id | None = None
    """Create-via-load: the session of the new model (with model_seq_id)."""
    model_seq_id: int | None = None
    """Create-via-load: the new model's index in its session."""
    path: PathText
    """A tinker:// path returned by save_state (or save_weights_for_sampler)."""
    optimizer: bool = False
    """Also restore the optimizer state."""


# Sampling ---------------------------------------------------------------------


class CreateSamplingSessionRequest(_Wire):
    """A sampler on saved weights (model_path) or on the base model."""

    session_id: Id
    """The owning session."""
    sampling_session_seq_id: int = Field(ge=0)
    """Index of the sampler in its session."""
    base_model: PathText | None = None
    """The base model (when sampling it directly)."""
    model_path: PathText | None = None
    """tinker:// path of sampler weights."""


class SamplingParams(types.SamplingParams):
    """sparring's `SamplingParams`, validated where the request is; unknown fields are ignored like everywhere on
    the wire."""

    model_config = ConfigDict(extra="ignore")

    @field_validator("stop")
    @classmethod
    def _few_short_stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOPS or any(isinstance(s, str) and len(s) > MAX_STOP_LENGTH for s in stops):
            raise ValueError(
                f"at most {MAX_STOPS} stops of at most {MAX_STOP_LENGTH} characters each (every one is "
                "checked at every decode step)"
            )
        return stop


class SampleRequest(_Wire):
    """asample: completions (and optionally prompt logprobs) from a sampling session."""

    sampling_session_id: Id | None = None
    """The sampler."""
    seq_id: int | None = None
    """Index of the request in its sampler (used to recognise retries)."""
    base_model: PathText | None = None
    """Sample the base model directly (without a session)."""
    model_path: PathText | None = None
    """Sample saved weights directly (without a session)."""
    num_samples: int = Field(default=1, ge=1)
    """Completions to draw."""
    prompt: WireModelInput
    """The prompt."""
    sampling_params: SamplingParams
    """How to sample."""
    prompt_logprobs: bool | None = None
    """Also score the prompt (compute_logprobs sets this)."""
    prompt_logprobs_last_n: int | None = Field(default=None, ge=1)
    """Score only the last N prompt tokens."""
    topk_prompt_logprobs: int = 0
    """Not served (must be 0)."""
    topk_sample_logprobs: int = 0
    """Not served (must be 0)."""
    prompt_alt_tokens_k: int = 0
    """Not served (must be 0)."""
    target_prompt_logprobs: Any = None
    """Not served (must be absent)."""

    def check_served(self) -> None:
        unserved = [
            name
            for name in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k")
            if getattr(self, name)
        ]
        if self.target_prompt_logprobs is not None:
            unserved.append("target_prompt_logprobs")
        if unserved:
            raise WireError(400, f"{', '.join(unserved)}: not served by sparring; leave them at their defaults")


class RequestIdRequest(_Wire):
    """Names a future (retrieve_future, cancel_future)."""

    request_id: Id
    """The future."""
    allow_metadata_only: bool = False
    """Ignored: results are always sent whole."""


class WeightsInfoRequest(_Wire):
    """What a checkpoint holds (older SDKs ask before creating a client from it)."""

    tinker_path: PathText
    """tinker:// path of the checkpoint."""
