"""Wire types shared by every layer, named and shaped like `tinker.types`.

Code written against the Tinker SDK builds the same objects here: a `Datum`
is one token sequence plus the tensors its loss needs, `ModelInput` is the
token sequence, `TensorData` carries a tensor in a form that serialises
(list + dtype + shape), and the request/response records mirror the SDK's so
that `result.loss`, `seq.tokens`, `seq.logprobs` read the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

StopReason = Literal["length", "stop"]
TensorDtype = Literal["int64", "float32"]

_NUMPY_DTYPE: dict[str, Any] = {"int64": np.int64, "float32": np.float32}
# Field name -> dtype for plain Python lists, whose dtype cannot be inferred reliably.
_KEY_DTYPE: dict[str, TensorDtype] = {
    "target_tokens": "int64",
    "weights": "float32",
    "advantages": "float32",
    "logprobs": "float32",
    "allowed_counts": "int64",
    "allowed_tokens": "int64",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class EncodedTextChunk(_Strict):
    """A run of token ids inside a `ModelInput`."""

    tokens: list[int]
    """The token ids, in order."""
    type: Literal["encoded_text"] = "encoded_text"
    """Chunk kind tag, as the Tinker wire format writes it."""

    @property
    def length(self) -> int:
        return len(self.tokens)


class ModelInput(_Strict):
    """The token sequence a model reads: a list of chunks (only text chunks here)."""

    chunks: list[EncodedTextChunk]
    """The chunks, concatenated in order."""

    @classmethod
    def from_ints(cls, tokens: Sequence[int]) -> ModelInput:
        return cls(chunks=[EncodedTextChunk(tokens=[int(t) for t in tokens])])

    @classmethod
    def empty(cls) -> ModelInput:
        return cls(chunks=[])

    def to_ints(self) -> list[int]:
        return [token for chunk in self.chunks for token in chunk.tokens]

    @property
    def length(self) -> int:
        return sum(chunk.length for chunk in self.chunks)

    def append(self, chunk: EncodedTextChunk) -> ModelInput:
        return ModelInput(chunks=[*self.chunks, chunk])

    def append_int(self, token: int) -> ModelInput:
        return self.append(EncodedTextChunk(tokens=[int(token)]))


@dataclass(frozen=True, eq=False)
class TensorData:
    """A tensor as flat data + dtype + shape, convertible to numpy and torch."""

    data: list[int] | list[float]
    """Flattened values (row-major)."""
    dtype: TensorDtype
    """Element type on the wire: int64 or float32."""
    shape: list[int] | None = None
    """Dense shape; None means one-dimensional of len(data)."""

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> TensorData:
        dtype: TensorDtype = "int64" if array.dtype.kind in "iub" else "float32"
        flat = array.astype(_NUMPY_DTYPE[dtype]).reshape(-1)
        return cls(data=flat.tolist(), dtype=dtype, shape=list(array.shape))

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> TensorData:
        return cls.from_numpy(
            tensor.detach().to("cpu", torch.float32 if tensor.is_floating_point() else torch.int64).numpy()
        )

    def to_numpy(self) -> np.ndarray:
        array = np.asarray(self.data, dtype=_NUMPY_DTYPE[self.dtype])
        return array.reshape(self.shape) if self.shape is not None else array

    def to_torch(self) -> torch.Tensor:
        return torch.from_numpy(self.to_numpy())

    def tolist(self) -> list:
        return self.to_numpy().tolist()

    def __len__(self) -> int:
        return self.shape[0] if self.shape else len(self.data)


def _to_tensor_data(key: str, value: Any) -> TensorData:
    if isinstance(value, TensorData):
        return value
    if isinstance(value, torch.Tensor):
        return TensorData.from_torch(value)
    if isinstance(value, np.ndarray):
        return TensorData.from_numpy(value)
    if isinstance(value, (list, tuple)):
        dtype = _KEY_DTYPE.get(key) or ("int64" if all(isinstance(v, (int, np.integer)) for v in value) else "float32")
        try:
            array = np.asarray(value, dtype=_NUMPY_DTYPE[dtype])
        except (TypeError, ValueError) as err:
            raise ValueError(f"loss_fn_inputs[{key!r}] must be a flat list of numbers: {err}") from err
        return TensorData.from_numpy(array)
    raise TypeError(
        f"loss_fn_inputs[{key!r}] has unsupported type {type(value).__name__}; use a list, numpy array, "
        "torch tensor or TensorData"
    )


@dataclass(frozen=True)
class Datum:
    """One training sequence: the tokens the model reads and the per-token loss inputs."""

    model_input: ModelInput
    """Input tokens; position i predicts target_tokens[i]."""
    loss_fn_inputs: dict[str, TensorData] = field(default_factory=dict)
    """Loss tensors by name (target_tokens, weights, logprobs, advantages), coerced to TensorData."""

    def __post_init__(self) -> None:
        coerced = {key: _to_tensor_data(key, value) for key, value in self.loss_fn_inputs.items()}
        object.__setattr__(self, "loss_fn_inputs", coerced)


class OutputConstraint(_Strict):
    """What a completion may be: one of a list of strings, a match of a regex, or JSON of a schema (exactly one given).

    A sparring extension of the Tinker sampling parameters: the sampler draws each token from the model's
    distribution renormalised over the tokens that keep the completion valid, and ends it with a stop token.
    """

    choices: list[str] | None = None
    """The completion is exactly one of these strings (each tokenised as the tokenizer writes it alone)."""
    regex: str | None = None
    """The completion matches this regular expression."""
    json_schema: dict | None = None
    """The completion is JSON valid under this JSON schema."""
    closing: str | None = None
    """Fixed text the completion ends with after its regex or JSON match: a forced tool call's closing, so the
    constrained reply is a whole call (sampled too, each token allowed alone)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> OutputConstraint:
        given = [name for name in ("choices", "regex", "json_schema") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of choices, regex, json_schema; got {given or 'none'}")
        if self.choices is not None and (
            not self.choices or any(not isinstance(c, str) or not c for c in self.choices)
        ):
            raise ValueError("choices must be a non-empty list of non-empty strings")
        if self.closing is not None and self.choices is not None:
            raise ValueError("closing goes with regex or json_schema; with choices, end each choice with it")
        return self

    def describe(self) -> str:
        """A short name of the constraint, for errors and logs."""
        return "choices" if self.choices is not None else "regex" if self.regex is not None else "json_schema"


class SamplingParams(_Strict):
    """How to sample a completion."""

    max_tokens: int | None = Field(default=None, ge=1)
    """Most new tokens to generate; None means up to the engine's default limit."""
    seed: int | None = None
    """Seed for reproducible sampling; the same seed and prompt give the same tokens."""
    stop: str | list[str] | list[int] | None = None
    """Stop strings or token ids; None keeps the tokenizer's end-of-turn tokens, [] disables all stops."""
    temperature: float = Field(default=1.0, ge=0.0)
    """Softmax temperature; 0 means greedy."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 for no limit."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    constraint: OutputConstraint | None = None
    """Constrain the completion to choices, a regex or a JSON schema (a sparring extension); None samples freely."""
    exploration: float = Field(default=0.0, ge=0.0, le=1.0)
    """Where a constraint limits the next token, the share of the draw taken uniformly over the allowed tokens (a
    sparring extension for training rollouts); `logprobs` stay the model's, `behaviour_logprobs` say what was drawn."""


class AdamParams(_Strict):
    """AdamW hyperparameters for one optimizer step (Tinker's defaults)."""

    learning_rate: float = Field(default=1e-4, ge=0.0)
    """Step size."""
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    """First-moment decay."""
    beta2: float = Field(default=0.95, ge=0.0, lt=1.0)
    """Second-moment decay."""
    eps: float = Field(default=1e-12, ge=0.0)
    """Denominator term for numerical stability."""
    weight_decay: float = Field(default=0.0, ge=0.0)
    """Decoupled weight decay."""
    grad_clip_norm: float = Field(default=0.0, ge=0.0)
    """Clip the global gradient norm to this value; 0 disables clipping."""


@dataclass(frozen=True)
class SampledSequence:
    """One sampled completion."""

    stop_reason: StopReason
    """'stop' when a stop string/token ended it, 'length' when max_tokens did."""
    tokens: list[int]
    """Generated token ids, including a stop token when one ended the sequence."""
    logprobs: list[float] | None = None
    """Sampler log-probability of each generated token (under the constraint's renormalised distribution where one
    was active)."""
    allowed_tokens: list[list[int]] | None = None
    """Per generated token, the tokens the constraint allowed there, encoded by `engine.allowed_tokens` (sorted ids, or
    the disallowed ids written as ~id when that is shorter; [] where nothing was constrained); None without a
    constraint."""
    behaviour_logprobs: list[float] | None = None
    """Log-probability of each generated token under the distribution it was drawn from (temperature, top-k/p,
    exploration), where that differs from `logprobs`; None when every token was drawn from the model's own."""


@dataclass(frozen=True)
class SampleResponse:
    """The completions for one sample request."""

    sequences: list[SampledSequence]
    """num_samples completions, in order."""
    prompt_logprobs: list[float | None] | None = None
    """Log-probability of each prompt token given its prefix (None for the first), when asked."""


LossFnOutput = dict[str, TensorData]


@dataclass(frozen=True)
class ForwardBackwardOutput:
    """Result of forward or forward_backward: per-datum outputs and batch metrics."""

    loss_fn_output_type: str
    """Kind of the per-datum records (always 'ArrayRecord' here)."""
    loss_fn_outputs: list[LossFnOutput]
    """Per datum: {'logprobs': learner log-probability of each target token, 'elementwise_loss': per-token loss}."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Scalars such as 'loss:sum' (the sum-reduced loss over the batch)."""

    @property
    def loss(self) -> float:
        return self.metrics["loss:sum"]


class OptimStepResponse(_Strict):
    """Result of an optimizer step."""

    metrics: dict[str, float] = Field(default_factory=dict)
    """Scalars such as 'grad_norm' and 'step'."""


class SaveWeightsResponse(_Strict):
    """Where save_state wrote the adapter and optimizer state."""

    path: str
    """Directory (or tinker:// path on a service) to pass to load_state."""


class SaveWeightsForSamplerResponse(_Strict):
    """Where save_weights_for_sampler wrote the sampler weights."""

    path: str
    """PEFT adapter directory (or tinker:// path) to pass to create_sampling_client."""


class LoadWeightsResponse(_Strict):
    """Result of load_state."""

    path: str | None = None
    """The path that was loaded."""


class ModelData(_Strict):
    """Architecture facts about a training client's base model."""

    arch: str | None = None
    """Model architecture (e.g. 'llama')."""
    model_name: str | None = None
    """The base model name the client was created with."""
    tokenizer_id: str | None = None
    """Where the tokenizer comes from."""


class GetInfoResponse(_Strict):
    """What get_info reports about a training client."""

    model_data: ModelData
    """Base model facts."""
    model_id: str
    """The client's adapter id."""
    is_lora: bool = True
    """Always true: sparring trains LoRA adapters."""
    lora_rank: int | None = None
    """Rank of the adapter."""
    model_name: str | None = None
    """The base model name."""
