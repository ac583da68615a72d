"""Conversions between sparring's wire types and the `tinker` SDK's, and between their futures.

sparring's types (`sparring.types`) have the SDK's shapes but are other
classes, so a remote client converts every argument on the way out and every
result on the way back. Values are copied as they are: the token ids and
logprobs a service returns reach the caller unchanged (the recorder trains
exactly those). `as_future` turns whatever an SDK call returned into a
`concurrent.futures.Future`, so waiting on it never goes through the SDK's
sync-only checks (which warn when called from an event loop).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from ...engine.learner import CONSTRAINT_INPUTS
from ...types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    GetInfoResponse,
    ModelData,
    ModelInput,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    TensorData,
)

TINKER_INSTALL_HINT = "pip install 'sparring[tinker]' (the tinker SDK needs Python 3.11+)"


def tinker_sdk():
    """The `tinker` module, or ImportError saying how to install it."""
    try:
        import tinker
    except ImportError as error:
        raise ImportError(
            "backend 'tinker' talks to the service through the tinker SDK, which is not installed: "
            f"{TINKER_INSTALL_HINT}"
        ) from error
    return tinker


def as_future(submitted: Any) -> Future:
    """The concurrent future behind an SDK future (or a completed one around a plain value, as older SDKs return)."""
    future = getattr(submitted, "future", None)
    if callable(future):  # checked first: some SDK futures are also (deprecated) concurrent futures
        return future()
    if isinstance(submitted, Future):
        return submitted
    done: Future = Future()
    done.set_result(submitted)
    return done


# sparring -> tinker ---------------------------------------------------------------------------


def to_tinker_model_input(prompt: ModelInput | list[int]):
    tokens = prompt.to_ints() if isinstance(prompt, ModelInput) else [int(t) for t in prompt]
    return tinker_sdk().types.ModelInput.from_ints(tokens)


CANNOT_CONSTRAIN = "backend 'tinker' samples on the remote service, which cannot constrain a reply"


def to_tinker_datum(datum: Datum):
    types = tinker_sdk().types
    if not isinstance(datum, Datum):
        raise TypeError(f"training data must be sparring.types.Datum, got {type(datum).__name__}")
    constrained = [key for key in CONSTRAINT_INPUTS if key in datum.loss_fn_inputs]
    if constrained:
        raise ValueError(f"{CANNOT_CONSTRAIN}, nor train on constrained positions: the datum carries {constrained}")
    inputs = {
        key: types.TensorData(data=tensor.to_numpy(), dtype=tensor.dtype, shape=tensor.shape)
        for key, tensor in datum.loss_fn_inputs.items()
    }
    return types.Datum(model_input=to_tinker_model_input(datum.model_input), loss_fn_inputs=inputs)


def to_tinker_sampling_params(params: SamplingParams, seed: int | None = None):
    """The SDK's sampling params; `seed` fills in a missing one. A constrained request is refused: never sampled
    freely."""
    if params.constraint is not None:
        raise ValueError(
            f"{CANNOT_CONSTRAIN} ({params.constraint.describe()}); sample constrained replies with a local backend"
        )
    values = params.model_dump(exclude={"constraint", "exploration"})  # exploration acts on constrained draws only
    if values["seed"] is None:
        values["seed"] = seed
    return tinker_sdk().types.SamplingParams(**values)


def to_tinker_adam(params: AdamParams):
    if not isinstance(params, AdamParams):
        raise TypeError(f"optim_step takes sparring.types.AdamParams, got {type(params).__name__}")
    return tinker_sdk().types.AdamParams(**params.model_dump())


# tinker -> sparring ---------------------------------------------------------------------------


def from_tinker_tensor(tensor: Any) -> TensorData:
    array = tensor.to_numpy()
    return TensorData.from_numpy(array)


def from_tinker_forward_backward(output: Any) -> ForwardBackwardOutput:
    outputs = [{key: from_tinker_tensor(value) for key, value in record.items()} for record in output.loss_fn_outputs]
    return ForwardBackwardOutput(output.loss_fn_output_type, outputs, dict(output.metrics))


def from_tinker_sample(response: Any) -> SampleResponse:
    sequences = [
        SampledSequence(
            stop_reason=sequence.stop_reason,
            tokens=list(sequence.tokens),
            logprobs=None if sequence.logprobs is None else list(sequence.logprobs),
        )
        for sequence in response.sequences
    ]
    prompt_logprobs = response.prompt_logprobs
    return SampleResponse(
        sequences=sequences, prompt_logprobs=None if prompt_logprobs is None else list(prompt_logprobs)
    )


def from_tinker_info(info: Any, base_model: str, rank: int) -> GetInfoResponse:
    data = info.model_data
    model_data = ModelData(
        arch=getattr(data, "arch", None),
        model_name=getattr(data, "model_name", None) or base_model,
        tokenizer_id=getattr(data, "tokenizer_id", None),
    )
    return GetInfoResponse(
        model_data=model_data,
        model_id=str(info.model_id),
        is_lora=bool(getattr(info, "is_lora", True)),
        lora_rank=getattr(info, "lora_rank", None) or rank,
        model_name=base_model,
    )
