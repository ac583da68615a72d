"""Assembly: episodes and advantages -> `Datum`s per trainable model.

A `Timeline` is one token sequence with its sampled spans marked; a `Datum`
is what the learner trains on. The shift happens here, once: position i of
the datum reads token i and predicts token i+1, so the advantage and the
sampler logprob live on the positions whose *target* was sampled. Every
trainable model (LoRA adapter) gets its own list, since each is stepped by
its own training client.

`apply_kl_penalty` folds a penalty towards the base model into the
advantages (Tinker-cookbook style) after the caller has scored the datums
with the base model. It needs to know which positions were sampled, which
a datum alone does not say (a sampled token may carry a zero advantage and
a zero logprob), so `build_sampled_masks` returns those masks in the same
order as `build_datums` returns the datums.

A timeline with constrained tokens gives its datum the allowed set of each
target (`allowed_counts`, `allowed_tokens`), so the learner renormalises
where the sampler did; other datums are built exactly as before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import torch

from ..engine.allowed_tokens import flatten_allowed
from ..rollout.types import Episode, Timeline
from ..types import Datum, ModelInput


def build_datums(
    episodes: list[Episode], advantages: dict[tuple[int, str], float | list[float]]
) -> dict[str, list[Datum]]:
    """One datum per timeline of every (episode, agent) that has an advantage, keyed by `timeline.model`.

    Timelines with no sampled target token are skipped (nothing to train).
    The advantage sits on every position that predicts a sampled token, 0 elsewhere; a list of per-call
    advantages puts each call's value on the tokens that call sampled.
    """
    datums_by_model: dict[str, list[Datum]] = defaultdict(list)
    for timeline, advantage in _trained_timelines(episodes, advantages):
        loss_fn_inputs = {
            "target_tokens": timeline.tokens[1:],
            "logprobs": timeline.logprobs[1:],
            "advantages": _token_advantages(timeline, advantage),
        }
        if timeline.allowed_tokens:
            counts, tokens = flatten_allowed(timeline.allowed_tokens[1:])
            loss_fn_inputs |= {"allowed_counts": counts, "allowed_tokens": tokens}
        datums_by_model[timeline.model].append(
            Datum(model_input=ModelInput.from_ints(timeline.tokens[:-1]), loss_fn_inputs=loss_fn_inputs)
        )
    return dict(datums_by_model)


def _token_advantages(timeline: Timeline, advantage: float | list[float]) -> list[float]:
    """The advantage of each target position of the timeline's datum (the token it predicts was sampled or not)."""
    if isinstance(advantage, list):
        return [advantage[call] if call >= 0 else 0.0 for call in timeline.call_index[1:]]
    return [advantage * sampled for sampled in timeline.loss_mask[1:]]


def build_sampled_masks(
    episodes: list[Episode], advantages: dict[tuple[int, str], float | list[float]]
) -> dict[str, list[list[int]]]:
    """Per model, the sampled-target mask of each datum `build_datums` builds, in the same order."""
    masks_by_model: dict[str, list[list[int]]] = defaultdict(list)
    for timeline, _ in _trained_timelines(episodes, advantages):
        masks_by_model[timeline.model].append(list(timeline.loss_mask[1:]))
    return dict(masks_by_model)


def apply_kl_penalty(
    datums: list[Datum],
    base_logprobs: list[list[float]],
    sampled_masks: list[list[int]],
    kl_coef: float,
) -> tuple[list[Datum], dict[str, float]]:
    """Subtract kl_coef * (sampler logprob - base logprob) from the advantage of every sampled target.

    `base_logprobs[i]` and `sampled_masks[i]` are aligned with `datums[i]`'s
    target tokens. Returns new datums and `kl/policy_base`, the mean log-ratio
    over sampled tokens (a sample estimate of KL(policy || base)).

    Constrained positions (a datum's `allowed_counts` > 0) carry no penalty: their
    sampler logprob is renormalised over the allowed set while the base logprob is
    over the whole vocabulary, so their difference would charge every constrained
    token -log p_base(allowed set), a bias rather than a divergence.
    `kl/constrained_share` says how many sampled targets that left out.
    """
    if not len(datums) == len(base_logprobs) == len(sampled_masks):
        raise ValueError(
            f"apply_kl_penalty: {len(datums)} datums, {len(base_logprobs)} base_logprobs and "
            f"{len(sampled_masks)} sampled_masks; they must be aligned one to one"
        )
    penalized = []
    log_ratio_sum = sampled_count = constrained_count = 0.0
    for index, (datum, base, mask) in enumerate(zip(datums, base_logprobs, sampled_masks, strict=True)):
        sampler_logprobs_N = datum.loss_fn_inputs["logprobs"].to_torch().double()
        advantages_N = datum.loss_fn_inputs["advantages"].to_torch().double()
        base_logprobs_N = torch.tensor(base, dtype=torch.float64)
        sampled_N = torch.tensor(mask, dtype=torch.float64)
        if not len(sampler_logprobs_N) == len(base_logprobs_N) == len(sampled_N):
            raise ValueError(
                f"apply_kl_penalty: datum {index} has {len(sampler_logprobs_N)} targets but "
                f"{len(base_logprobs_N)} base logprobs and {len(sampled_N)} mask entries"
            )
        if "allowed_counts" in datum.loss_fn_inputs:
            constrained_N = (datum.loss_fn_inputs["allowed_counts"].to_torch() > 0).double() * sampled_N
            constrained_count += constrained_N.sum().item()
            sampled_N = sampled_N - constrained_N
        log_ratio_N = (sampler_logprobs_N - base_logprobs_N) * sampled_N
        log_ratio_sum += log_ratio_N.sum().item()
        sampled_count += sampled_N.sum().item()
        loss_fn_inputs = {**datum.loss_fn_inputs, "advantages": (advantages_N - kl_coef * log_ratio_N).tolist()}
        penalized.append(Datum(model_input=datum.model_input, loss_fn_inputs=loss_fn_inputs))
    metrics = {"kl/policy_base": log_ratio_sum / sampled_count if sampled_count else 0.0}
    if constrained_count:
        metrics["kl/constrained_share"] = constrained_count / (constrained_count + sampled_count)
    return penalized, metrics


def assembly_metrics(episodes: list[Episode], datums_by_model: dict[str, list[Datum]]) -> dict[str, float]:
    """How much was sampled, trained and saved by merging calls into timelines.

    - `tokens/sampled`: sampled tokens over all timelines of the episodes.
    - `tokens/trained`: datum positions with a non-zero advantage (the ones the learner takes gradient on).
    - `tokens/total`: datum positions the learner processes.
    - `timeline/num`, `timeline/calls`, `timeline/merge_rate` (1 - timelines/calls).
    - `tokens/per_call_equivalent`: tokens a one-datum-per-call assembly would process. Under exact-prefix
      merging, call j's prompt+completion is the timeline up to the end of its completion span, so this is
      the sum of span ends. Two completions with no prompt token between them read as one span, so it is
      a lower bound in that (rare) case.
    - `tokens/saved_by_merging`: per-call equivalent minus the merged timelines' length.
    """
    timelines = [timeline for episode in episodes for timeline in episode.timelines]
    datums = [datum for model_datums in datums_by_model.values() for datum in model_datums]
    calls = sum(timeline.num_calls for timeline in timelines)
    per_call_equivalent = sum(sum(_completion_span_ends(timeline)) for timeline in timelines)
    return {
        "tokens/sampled": float(sum(sum(timeline.loss_mask) for timeline in timelines)),
        "tokens/trained": float(
            sum(int((datum.loss_fn_inputs["advantages"].to_torch() != 0).sum()) for datum in datums)
        ),
        "tokens/total": float(sum(datum.model_input.length for datum in datums)),
        "timeline/num": float(len(timelines)),
        "timeline/calls": float(calls),
        "timeline/merge_rate": 1.0 - len(timelines) / calls if calls else 0.0,
        "tokens/per_call_equivalent": float(per_call_equivalent),
        "tokens/saved_by_merging": float(per_call_equivalent - sum(len(timeline.tokens) for timeline in timelines)),
    }


def _trained_timelines(
    episodes: list[Episode], advantages: dict[tuple[int, str], float | list[float]]
) -> Iterator[tuple[Timeline, float | list[float]]]:
    """(timeline, advantage) for every timeline to train on, in episode then timeline order."""
    for episode_index, episode in enumerate(episodes):
        for timeline_index, timeline in enumerate(episode.timelines):
            advantage = advantages.get((episode_index, timeline.agent))
            if advantage is None:
                continue
            if not len(timeline.tokens) == len(timeline.loss_mask) == len(timeline.logprobs):
                raise ValueError(
                    f"episode {episode_index}, agent {timeline.agent!r}, timeline {timeline_index}: "
                    f"tokens ({len(timeline.tokens)}), loss_mask ({len(timeline.loss_mask)}) and "
                    f"logprobs ({len(timeline.logprobs)}) must have the same length"
                )
            if any(timeline.loss_mask[1:]):
                yield timeline, advantage


def _completion_span_ends(timeline: Timeline) -> list[int]:
    """Index just past each run of sampled tokens."""
    mask = timeline.loss_mask
    return [i + 1 for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
