"""`SamplingClient`: sample from the base model, a live adapter, or frozen weights.

`with_prompt_logprobs` joins a sample and its prompt's log-probabilities
into one `SampleResponse`, for this client and for the Tinker server alike.

A sampling client names one adapter of an engine (or none, for the base
model). Snapshots and loaded sampler weights are frozen adapters that this
client owns: when the client is garbage-collected the adapter is released,
so an RL loop that takes a new snapshot every step does not accumulate them.
"""

from __future__ import annotations

import weakref

from ..engine import Engine
from ..types import ModelInput, SampleResponse, SamplingParams
from .futures import APIFuture, ReadyClient, Submitted


class SamplingClient(ReadyClient):
    """Generates completions and scores prompts with one set of weights."""

    def __init__(self, engine: Engine, adapter: str | None, base_model: str, owns_adapter: bool = False):
        self.engine = engine
        self.adapter = adapter
        self.base_model = base_model
        if owns_adapter:
            weakref.finalize(self, _release, engine, adapter)

    def sample(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
    ) -> APIFuture[SampleResponse]:
        tokens = _tokens(prompt)
        params = sampling_params or SamplingParams()
        sampled = APIFuture(self.engine.sample(self.adapter, tokens, num_samples, params))
        if not include_prompt_logprobs:
            return sampled
        return sampled.join(self.compute_logprobs(prompt), with_prompt_logprobs)

    def sample_async(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
    ) -> Submitted[SampleResponse]:
        return Submitted(self.sample(prompt, num_samples, sampling_params, include_prompt_logprobs))

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        tokens = _tokens(prompt)
        return APIFuture(self.engine.score(self.adapter, tokens))

    def compute_logprobs_async(self, prompt: ModelInput) -> Submitted[list[float | None]]:
        return Submitted(self.compute_logprobs(prompt))

    def get_tokenizer(self):
        return self.engine.tokenizer

    def get_renderer(self):
        """The chat renderer of the base model (messages <-> tokens)."""
        return self.engine.loaded.renderer

    def get_base_model(self) -> str:
        return self.base_model


def with_prompt_logprobs(
    response: SampleResponse, prompt_logprobs: list[float | None], prompt_logprobs_last_n: int | None = None
) -> SampleResponse:
    """`response` with its prompt's log-probabilities: all of them, or only the last `prompt_logprobs_last_n` (the
    rest None).

    The one place a sample and its prompt's scores (two engine requests) become one response, locally and on the server.
    """
    if prompt_logprobs_last_n is not None:
        if prompt_logprobs_last_n >= len(prompt_logprobs):
            raise ValueError(
                f"prompt_logprobs_last_n must be below the prompt length {len(prompt_logprobs)}, got "
                f"{prompt_logprobs_last_n}"
            )
        kept = prompt_logprobs[-prompt_logprobs_last_n:]
        prompt_logprobs = [None] * (len(prompt_logprobs) - prompt_logprobs_last_n) + kept
    return SampleResponse(sequences=response.sequences, prompt_logprobs=prompt_logprobs)


def _tokens(prompt: ModelInput | list[int]) -> list[int]:
    if isinstance(prompt, ModelInput):
        return prompt.to_ints()
    if isinstance(prompt, (list, tuple)):
        return [int(t) for t in prompt]
    raise TypeError(f"prompt must be a ModelInput (or a list of token ids), got {type(prompt).__name__}")


def _release(engine: Engine, adapter: str) -> None:
    engine.release(adapter)
