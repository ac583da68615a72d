"""A sampling client whose 'samples' are scripted replies, for tests that need exact text (tool calls) from a model.

The replies go through the real renderer, recorder and timeline merging; only
the sampled tokens are fixed. A prompt that prefills the reply (a forced tool
call) gets only the rest of the scripted reply as its sample, as a model would;
a scripted reply that does not start with the prefill fails the test.
"""

from __future__ import annotations

import asyncio

from sparring.types import SampledSequence, SampleResponse

GENERATION_PROMPT = "<|im_start|>assistant\n"


class ScriptedSampler:
    """A sampling client that 'samples' scripted replies through the real renderer (logprob -0.5 per token)."""

    def __init__(self, renderer, replies: list[str], delay: float = 0.0):
        self.renderer = renderer
        self.replies = list(replies)
        self.delay = delay
        self.prompts: list[list[int]] = []
        self.prefills: list[str] = []

    def get_renderer(self):
        return self.renderer

    async def sample(self, prompt, num_samples, sampling_params):
        tokens = list(prompt.to_ints())
        self.prompts.append(tokens)
        prefill = self.renderer.decode(tokens).rpartition(GENERATION_PROMPT)[2]
        self.prefills.append(prefill)
        await asyncio.sleep(self.delay)
        reply = self.replies.pop(0)
        assert reply.startswith(prefill), (
            f"the scripted reply {reply!r} does not continue the prompt's prefill {prefill!r}"
        )
        sampled = self.renderer.encode_text(reply[len(prefill) :]) + [self.renderer.stop_token_ids[0]]
        sequence = SampledSequence(stop_reason="stop", tokens=sampled, logprobs=[-0.5] * len(sampled))
        return SampleResponse(sequences=[sequence] * num_samples)
