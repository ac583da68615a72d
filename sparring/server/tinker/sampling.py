"""A sampling session as the wire sees it (`Sampler`), and the work of one sample request.

`TinkerService` keeps the bookkeeping (which session owns which sampler, a
retried request answered once); what one `asample` request asks of the
engine lives here: `check_sample` refuses one that does not fit the model's
context or the server's `ServerLimits` before it is queued, and
`sample_request` samples it, scoring the prompt beside it when asked.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ...clients import SamplingClient
from ...clients.sampling_client import with_prompt_logprobs
from ...engine import Engine
from ...types import SampleResponse
from ..limits import ServerLimits, check_sampling_room
from . import wire


@dataclass
class Sampler:
    """A sampling session as the wire sees it."""

    client: SamplingClient
    """The sparring sampler."""
    session_id: str
    """The owning session."""
    served_name: str
    """The base model's name as the client asked for it (what `get_sampler` answers)."""
    model_path: str | None = None
    """tinker:// path it was loaded from, if any."""
    request_ids: dict[int, str] = field(default_factory=dict)
    """seq_id -> request id of recent samples, so a retried sample is not sampled twice."""


def check_sample(request: wire.SampleRequest, engine: Engine, limits: ServerLimits) -> None:
    """The request's work fits the model's context and the server's limits (LimitExceeded naming the field if not)."""
    prompt = request.prompt.token_count()
    max_tokens = request.sampling_params.max_tokens
    check_sampling_room("sampling_params.max_tokens", prompt, max_tokens, engine.max_context)
    limits.check_num_samples("num_samples", request.num_samples)
    completion = min(max_tokens or engine.config.default_max_tokens, engine.max_context - prompt)
    scoring = prompt if request.prompt_logprobs else 0
    what = f"prompt ({prompt}) + num_samples ({request.num_samples}) x max_tokens ({completion})" + (
        " + prompt scoring" if scoring else ""
    )
    limits.check_tokens("num_samples", prompt + scoring + request.num_samples * completion, what)


async def sample_request(client: SamplingClient, request: wire.SampleRequest) -> SampleResponse:
    """What `request` asks of `client`: its samples, with the prompt's log-probabilities when it asks for them."""
    prompt = request.prompt.to_sparring()
    sampled = client.sample(prompt, request.num_samples, request.sampling_params)
    if not request.prompt_logprobs:
        return await sampled
    # Sampling and scoring are two engine requests, awaited side by side (cancelling this cancels both).
    response, logprobs = await asyncio.gather(sampled.result_async(), client.compute_logprobs(prompt).result_async())
    return with_prompt_logprobs(response, logprobs, request.prompt_logprobs_last_n)
