"""`RemoteSamplingClient`: sparring's sampling interface on a Tinker-protocol service.

It wraps one `tinker.SamplingClient` (a sampling session on the service:
the base model, saved weights, a snapshot, or a training model's in-flight
weights) and answers in sparring's types, so `PolicyChatModel`,
`FrozenChatModel` and the KL penalty use it exactly as they use a local
`SamplingClient`. Tokens and logprobs are the service's, copied unchanged.

An in-flight client (`live=True`) stands for "the current weights of one
training model": under the Tinker contract an in-flight sampler is only
guaranteed the weights published when it was created, so its training client
publishes again after every optimizer step and `swap`s the new session in;
every sample started after the step sees the new weights.

The tokenizer and chat renderer are local: `base_model_text` loads them from
the base model's name or path (no weights), once per process.
`SeedStream` gives requests that carry no seed one drawn from a seeded
stream, as `Engine.reseed` does locally, so a run's sampling follows its seed.
"""

from __future__ import annotations

import functools
import random
import threading
from typing import Any

from ...models import load_tokenizer
from ...types import ModelInput, SampleResponse, SamplingParams
from ..futures import APIFuture, ReadyClient, Submitted
from .convert import as_future, from_tinker_sample, to_tinker_model_input, to_tinker_sampling_params


@functools.cache
def base_model_text(base_model: str) -> tuple[Any, Any]:
    """(tokenizer, chat renderer) of a base model, loaded once per process without its weights."""
    return load_tokenizer(base_model)


class SeedStream:
    """Seeds for sampling requests without one; None (the service's own randomness) until reseeded."""

    def __init__(self) -> None:
        self._random: random.Random | None = None
        self._lock = threading.Lock()

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._random = random.Random(seed)

    def next(self) -> int | None:
        with self._lock:
            return (
                None if self._random is None else self._random.getrandbits(32)
            )  # services multiply it per sample: keep it small


class RemoteSamplingClient(ReadyClient):
    """Generates completions and scores prompts on a service's sampling session."""

    constrains_output = False
    """The Tinker protocol has no constrained sampling: a constrained request is refused (see `convert`)."""

    def __init__(self, sampler: Any, base_model: str, seeds: SeedStream | None = None, live: bool = False):
        self.tinker_client = sampler
        """The SDK's sampling client (swapped for a newer session when `live`)."""
        self.base_model = base_model
        self.seeds = seeds
        self.live = live

    def swap(self, sampler: Any) -> RemoteSamplingClient:
        """Sample from `sampler` from now on (a live client's newly published weights)."""
        if not self.live:
            raise ValueError("only an in-flight sampling client follows new weights; this one is frozen")
        self.tinker_client = sampler
        return self

    def sample(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
    ) -> APIFuture[SampleResponse]:
        params = to_tinker_sampling_params(
            sampling_params or SamplingParams(), self.seeds.next() if self.seeds is not None else None
        )
        submitted = self.tinker_client.sample(
            to_tinker_model_input(prompt), num_samples, params, include_prompt_logprobs=include_prompt_logprobs
        )
        return APIFuture(as_future(submitted)).then(from_tinker_sample)

    def sample_async(
        self,
        prompt: ModelInput,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
    ) -> Submitted[SampleResponse]:
        return Submitted(self.sample(prompt, num_samples, sampling_params, include_prompt_logprobs))

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        return APIFuture(as_future(self.tinker_client.compute_logprobs(to_tinker_model_input(prompt)))).then(list)

    def compute_logprobs_async(self, prompt: ModelInput) -> Submitted[list[float | None]]:
        return Submitted(self.compute_logprobs(prompt))

    def get_tokenizer(self):
        return base_model_text(self.base_model)[0]

    def get_renderer(self):
        """The chat renderer of the base model (messages <-> tokens)."""
        return base_model_text(self.base_model)[1]

    def get_base_model(self) -> str:
        return self.base_model
