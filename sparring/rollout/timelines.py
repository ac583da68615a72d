"""Merge an agent's model calls into training sequences on exact token prefixes.

A call whose prompt starts with an earlier call's prompt + completion
continues that timeline: the new prompt tokens are appended unmasked and the
new completion masked in, so a multi-turn agent becomes one sequence (one
forward/backward pass) instead of one per call, and every shared prefix is
processed once. Calls that continue nothing start a new timeline. Merging is
exact by construction: it compares token ids, never text. Each sampled
token remembers which of its agent's calls produced it (`call_index`), so
per-turn credit can still tell the merged turns apart, and each keeps the
set of tokens a constraint allowed when it was sampled (`allowed_tokens`),
which the learner renormalises over. A timeline sums its calls' log
importance weights, for the learner's correction of exploration.
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
                    allowed_tokens=_extended_allowed([], 0, len(call.prompt_tokens), call),
                    log_importance_weight=_log_importance_weight(call),
                )
            )
            continue
        new_prompt = call.prompt_tokens[len(target.tokens) :]
        target.allowed_tokens = _extended_allowed(target.allowed_tokens, len(target.tokens), len(new_prompt), call)
        target.tokens += [*new_prompt, *call.completion_tokens]
        target.loss_mask += [0] * len(new_prompt) + [1] * len(call.completion_tokens)
        target.logprobs += [0.0] * len(new_prompt) + list(call.logprobs)
        target.call_index += [-1] * len(new_prompt) + [index] * len(call.completion_tokens)
        target.num_calls += 1
        target.log_importance_weight += _log_importance_weight(call)
    return timelines


def _log_importance_weight(call: ModelCall) -> float:
    """log p(model) - log q(drawn from) of the call's completion (0 when drawn from the model's own distribution)."""
    return sum(call.logprobs) - sum(call.behaviour_logprobs) if call.behaviour_logprobs else 0.0


def _extended_allowed(
    allowed: list[list[int]], length: int, new_prompt_length: int, call: ModelCall
) -> list[list[int]]:
    """A timeline's allowed sets (`length` tokens so far) after the call's new prompt tokens and its completion are
    appended; [] while none of its tokens was constrained."""
    if not allowed and not call.allowed_tokens:
        return []
    before = allowed or [[] for _ in range(length)]
    completion = call.allowed_tokens or [[] for _ in call.completion_tokens]
    return [*before, *([] for _ in range(new_prompt_length)), *completion]


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
