"""Merge an agent's model calls into training sequences on exact token prefixes.

A call whose prompt starts with an earlier call's prompt + completion
continues that timeline: the new prompt tokens are appended unmasked and the
new completion masked in, so a multi-turn agent becomes one sequence (one
forward/backward pass) instead of one per call, and every shared prefix is
processed once. Calls that continue nothing start a new timeline. Merging is
exact by construction: it compares token ids, never text. Each sampled
token remembers which of its agent's calls produced it (`call_index`), so
per-turn credit can still tell the merged turns apart.
"""

from __future__ import annotations

from collections import Counter

from .types import ModelCall, Timeline


def merge_calls(calls: list[ModelCall]) -> list[Timeline]:
    """Timelines of `calls` (in call order), merged per (agent, model) on exact prefixes."""
    timelines: list[Timeline] = []
    calls_so_far: Counter[str] = Counter()
    for call in calls:
        index = calls_so_far[call.agent]
        calls_so_far[call.agent] += 1
        target = _longest_continued(timelines, call)
        if target is None:
            timelines.append(
                Timeline(
                    agent=call.agent,
                    model=call.model,
                    tokens=[*call.prompt_tokens, *call.completion_tokens],
                    loss_mask=[0] * len(call.prompt_tokens) + [1] * len(call.completion_tokens),
                    logprobs=[0.0] * len(call.prompt_tokens) + list(call.logprobs),
                    call_index=[-1] * len(call.prompt_tokens) + [index] * len(call.completion_tokens),
                )
            )
            continue
        new_prompt = call.prompt_tokens[len(target.tokens) :]
        target.tokens += [*new_prompt, *call.completion_tokens]
        target.loss_mask += [0] * len(new_prompt) + [1] * len(call.completion_tokens)
        target.logprobs += [0.0] * len(new_prompt) + list(call.logprobs)
        target.call_index += [-1] * len(new_prompt) + [index] * len(call.completion_tokens)
        target.num_calls += 1
    return timelines


def _longest_continued(timelines: list[Timeline], call: ModelCall) -> Timeline | None:
    best = None
    for timeline in timelines:
        if timeline.agent != call.agent or timeline.model != call.model:
            continue
        length = len(timeline.tokens)
        if length <= len(call.prompt_tokens) and call.prompt_tokens[:length] == timeline.tokens:
            if best is None or length > len(best.tokens):
                best = timeline
    return best
