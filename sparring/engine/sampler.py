"""Batched sampling: many prompts, many samples each, one decode loop.

A `SampleJob` is one prompt with its parameters; `generate` runs any number of
jobs together. Each distinct prompt is prefilled once (jobs with the same
prompt, such as a GRPO group's episodes, share it) and its cache rows are
copied for its samples (a prefix common to all prompts of the batch,
such as a system prompt, is prefilled once for all of them; with a
`prefix_cache.PrefixStore`, only what it does not hold yet of each prompt is
prefilled, and prompts and completions are kept there for later requests);
each decode step computes logits for the last position only; rows that finish are dropped from the batch so later steps
cost less. Every row draws from its own `torch.Generator`, so a seeded
request gives the same tokens whatever else shares its batch, and sampling
is an inverse-CDF lookup on one uniform per row (cheaper than
`torch.multinomial`), in two levels (the CDF of block sums, then a cumsum
inside one block) so no step runs a cumsum over the whole vocabulary.

A job may carry a constraint (`constraints`): before each draw, its rows'
logits outside the allowed tokens become -inf, so the draw (temperature,
top-k/p and greedy included) and the returned logprob are those of the
distribution renormalised over the allowed tokens, and each row records the
allowed set of every token it drew (`allowed_tokens` encoding) for the
learner to renormalise over the same set. Batches without a constrained row
skip all of it.

Returned logprobs are the model's own (temperature 1, no top-k/top-p), the
same quantity the learner computes, so importance ratios start at 1; at
temperature 1 they reuse the normaliser the draw already computed instead of
a log_softmax over the vocabulary. Where a row draws from another distribution
(a temperature, top-k/p, or `exploration`: a constrained row's draw mixed with
the uniform over its allowed tokens), its `behaviour_logprobs` are that
distribution's, so the trainer can weight the update back to the policy.
Per-row parameters become tensors once, and again only when rows are dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..types import SampledSequence, SampleResponse, SamplingParams
from .allowed_tokens import allowed_masks
from .constraints import CompiledConstraint, RowConstraint
from .decoder import FastDecoder, HFCache, HFDecoder, KVCache
from .prefix_cache import PrefillCounts, PrefixMatch, PrefixStore
from .prefix_tree import common_prefix_length

# Drop finished rows once this share of the batch has finished (copying the cache has a cost).
_COMPACT_FRACTION = 0.125
# Prompts of one batch that share at least this many leading tokens run them once.
_MIN_SHARED_PREFIX = 8
# Vocabulary entries per block of the two-level CDF inversion.
_CDF_BLOCK = 256


@dataclass
class SampleJob:
    """One prompt to sample `num_samples` completions from."""

    prompt_tokens: list[int]
    """The prompt, as token ids."""
    num_samples: int
    """How many independent completions to draw."""
    params: SamplingParams
    """Temperature, top-k/p, max_tokens, stops and seed."""
    stop_token_ids: frozenset[int]
    """Token ids that end a completion (kept as its last token)."""
    stop_strings: tuple[str, ...]
    """Strings that end a completion once its decoded text contains them."""
    max_tokens: int
    """Resolved max new tokens (params.max_tokens or the engine default, within the context)."""
    generators: list[torch.Generator] = field(default_factory=list)
    """One random stream per sample."""
    constraint: CompiledConstraint | None = None
    """What every completion must be (choices, regex, JSON schema); None samples freely."""


@dataclass
class _Row:
    job: int
    constraint: RowConstraint | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    behaviour_logprobs: list[float] = field(default_factory=list)
    """Logprob of each drawn token under the distribution it was drawn from (`logprobs` where that was the model's)."""
    allowed: list[list[int]] = field(default_factory=list)
    """The encoded allowed set of each drawn token (constrained rows only)."""
    stop_reason: str | None = None


def _filter_top_k_top_p(logits_R_V: torch.Tensor, top_k_R: torch.Tensor, top_p_R: torch.Tensor) -> torch.Tensor:
    vocab = logits_R_V.shape[-1]
    sorted_logits, order = logits_R_V.sort(dim=-1, descending=True)
    rank_V = torch.arange(vocab, device=logits_R_V.device)
    k_R = torch.where(top_k_R > 0, top_k_R, torch.full_like(top_k_R, vocab))
    drop = rank_V[None, :] >= k_R[:, None]
    probs = sorted_logits.softmax(-1)
    # Keep the smallest prefix whose mass reaches top_p (the token crossing the threshold stays).
    drop |= (probs.cumsum(-1) - probs) >= top_p_R[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits_R_V).scatter_(-1, order, sorted_logits)


@dataclass
class _RowSettings:
    """Each live row's sampling parameters as tensors; None where no row needs that step."""

    temperature_R: torch.Tensor | None
    """Temperatures (greedy rows count as 1); None when every row samples at temperature 1."""
    greedy_R: torch.Tensor | None
    """True for temperature-0 rows; None when there are none."""
    top_k_R: torch.Tensor | None
    """top_k per row (-1 for none); None, with top_p_R, when no row filters."""
    top_p_R: torch.Tensor | None
    """top_p per row."""
    exploration_R: torch.Tensor | None = None
    """Share of each constrained row's draw taken uniformly over its allowed tokens; None when no row explores."""

    @classmethod
    def of(cls, params: list[SamplingParams], device: torch.device) -> _RowSettings:
        temperatures = [p.temperature or 1.0 for p in params]
        greedy = [p.temperature == 0 for p in params]
        filters = any(p.top_k > 0 or p.top_p < 1.0 for p in params)
        exploration = [p.exploration if p.constraint is not None and p.temperature else 0.0 for p in params]
        return cls(
            temperature_R=torch.tensor(temperatures, device=device) if any(t != 1.0 for t in temperatures) else None,
            greedy_R=torch.tensor(greedy, device=device) if any(greedy) else None,
            top_k_R=torch.tensor([p.top_k for p in params], device=device) if filters else None,
            top_p_R=torch.tensor([p.top_p for p in params], device=device) if filters else None,
            exploration_R=torch.tensor(exploration, device=device) if any(exploration) else None,
        )


def _draw(
    logits_R_V: torch.Tensor, settings: _RowSettings, uniform_R: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One token per row, its logprob under the model's own distribution (temperature 1, unfiltered), and its logprob
    under the distribution it was drawn from (None where that is the model's own for every row).

    With exploration, a row draws from (1 - e) * its tempered distribution + e * uniform over its allowed tokens (the
    finite logits, which a constraint has already masked), so a policy that turned deterministic still tries every
    allowed reply; greedy rows never explore.
    """
    scaled_R_V = logits_R_V
    if settings.temperature_R is not None:
        scaled_R_V = scaled_R_V / settings.temperature_R[:, None]
    if settings.top_k_R is not None:
        scaled_R_V = _filter_top_k_top_p(scaled_R_V, settings.top_k_R, settings.top_p_R)
    max_R_1 = scaled_R_V.amax(-1, keepdim=True)
    weights_R_V = (scaled_R_V - max_R_1).exp_()
    if settings.exploration_R is not None:
        allowed_R_V = torch.isfinite(logits_R_V).to(weights_R_V.dtype)
        share_R_1 = settings.exploration_R[:, None]
        policy_R_V = weights_R_V / weights_R_V.sum(-1, keepdim=True)
        weights_R_V = (1 - share_R_1) * policy_R_V + share_R_1 * allowed_R_V / allowed_R_V.sum(-1, keepdim=True)
    drawn_R_V = weights_R_V if settings.exploration_R is not None or scaled_R_V is not logits_R_V else None
    tokens_R, mass_R = _invert_cdf(weights_R_V, uniform_R)
    if settings.greedy_R is not None:
        tokens_R = torch.where(settings.greedy_R, logits_R_V.argmax(-1), tokens_R)
    if drawn_R_V is None:  # sampled from the model's own distribution: its normaliser is known
        log_normaliser_R = max_R_1.squeeze(-1) + mass_R.log()
    else:
        log_normaliser_R = logits_R_V.logsumexp(-1)
    logprobs_R = logits_R_V.gather(-1, tokens_R[:, None]).squeeze(-1) - log_normaliser_R
    if drawn_R_V is None:
        return tokens_R, logprobs_R, None
    behaviour_R = (drawn_R_V.gather(-1, tokens_R[:, None]).squeeze(-1) / mass_R).log()
    if settings.greedy_R is not None:  # a greedy draw is no distribution to correct for: it counts as the model's
        behaviour_R = torch.where(settings.greedy_R, logprobs_R, behaviour_R)
    return tokens_R, logprobs_R, behaviour_R


def _constrain(
    logits_R_V: torch.Tensor, rows: list[_Row], live: list[int]
) -> tuple[torch.Tensor, dict[int, list[int]]]:
    """The logits with every constrained row's disallowed tokens at -inf, and each such slot's encoded allowed set."""
    slots = [
        slot
        for slot, row_index in enumerate(live)
        if rows[row_index].constraint is not None and rows[row_index].stop_reason is None
    ]
    if not slots:
        return logits_R_V, {}
    encoded = [rows[live[slot]].constraint.allowed() for slot in slots]
    allowed_C_V = allowed_masks(encoded, logits_R_V.shape[-1], logits_R_V.device)
    slots_C = torch.tensor(slots, device=logits_R_V.device)
    masked_C_V = logits_R_V.index_select(0, slots_C).masked_fill_(~allowed_C_V, float("-inf"))
    return logits_R_V.index_put((slots_C,), masked_C_V), dict(zip(slots, encoded, strict=True))


def _invert_cdf(weights_R_V: torch.Tensor, uniform_R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw index i with probability weights[i] / sum(weights), and return the sums too.

    Two levels instead of one cumsum over the vocabulary: the CDF of block sums picks a
    block, the cumsum inside that block picks the token. Only entries with non-zero
    weight are ever picked.
    """
    rows, vocab = weights_R_V.shape
    blocks = -(-vocab // _CDF_BLOCK)
    if blocks * _CDF_BLOCK != vocab:
        weights_R_V = F.pad(weights_R_V, (0, blocks * _CDF_BLOCK - vocab))
    weights_R_N_K = weights_R_V.view(rows, blocks, _CDF_BLOCK)
    block_cdf_R_N = weights_R_N_K.sum(-1).cumsum(-1)
    target_R_1 = uniform_R[:, None] * block_cdf_R_N[:, -1:]
    block_R_1 = _first_above(block_cdf_R_N, target_R_1)
    before_R_1 = torch.where(block_R_1 > 0, block_cdf_R_N.gather(-1, (block_R_1 - 1).clamp(min=0)), 0.0)
    inner_cdf_R_K = weights_R_N_K.gather(1, block_R_1[:, :, None].expand(-1, -1, _CDF_BLOCK)).squeeze(1).cumsum(-1)
    offset_R_1 = _first_above(inner_cdf_R_K, target_R_1 - before_R_1)
    return (block_R_1 * _CDF_BLOCK + offset_R_1).squeeze(-1), block_cdf_R_N[:, -1]


def _first_above(cdf_R_N: torch.Tensor, target_R_1: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose (non-decreasing) CDF exceeds target; where rounding puts target
    past the end, the first index that reaches the total. Either index adds non-zero weight."""
    above_R_1 = torch.searchsorted(cdf_R_N, target_R_1, right=True)
    return torch.minimum(above_R_1, torch.searchsorted(cdf_R_N, cdf_R_N[:, -1:].contiguous()))


def _stopped(row: _Row, job: SampleJob, tokenizer) -> str | None:
    if row.tokens[-1] in job.stop_token_ids:
        return "stop"
    if row.constraint is not None and row.constraint.finished:
        return "stop"
    if job.stop_strings and row.constraint is None:  # a constraint decides where its completion ends
        longest = max(len(s) for s in job.stop_strings)
        tail = tokenizer.decode(row.tokens[-(longest + 8) :], skip_special_tokens=False)
        if any(s in tail for s in job.stop_strings):
            return "stop"
    if len(row.tokens) >= job.max_tokens:
        return "length"
    return None


def _prefill(
    decoder: FastDecoder | HFDecoder,
    prompts: list[list[int]],
    max_new: int,
    pad_token_id: int,
    device: torch.device,
    counts: PrefillCounts,
) -> tuple[KVCache | HFCache, torch.Tensor, torch.Tensor]:
    """Fill a cache with every prompt (one row each); return it, the last-position logits and each prompt's last
    position.

    A prefix that all prompts share (a system prompt, say) is run once and its cache row copied. Rows are
    laid out [shared prefix | padding | rest of the prompt], so every prompt ends in the same slot; the
    padding is masked wherever it sits.
    """
    shared = _shared_prefix_length(prompts)
    rest_len = max(len(p) for p in prompts) - shared
    cache = decoder.allocate(1 if shared else len(prompts), shared + rest_len + max_new)
    if shared:
        prefix_1_L = torch.tensor([prompts[0][:shared]], device=device)
        decoder.forward(
            prefix_1_L, torch.arange(shared, device=device)[None], torch.ones_like(prefix_1_L, dtype=torch.bool), cache
        )
        cache.keep_rows(torch.zeros(len(prompts), dtype=torch.long, device=device))
    counts.prefilled_tokens += shared + sum(len(p) - shared for p in prompts)
    logits_J_V, last_position_J = _prefill_rests(decoder, cache, prompts, [shared] * len(prompts), pad_token_id, device)
    return cache, logits_J_V, last_position_J


def _prefill_from_store(
    decoder: FastDecoder,
    prompts: list[list[int]],
    max_new: int,
    pad_token_id: int,
    device: torch.device,
    store: PrefixStore,
    counts: PrefillCounts,
) -> tuple[KVCache, torch.Tensor, torch.Tensor]:
    """`_prefill`, reading what `store` holds of each prompt and prefilling only the rest; what is computed is stored.

    A prefix all prompts share that the store lacks is run once first and stored, so every row then finds it.
    Row j is laid out [its cached prefix | padding | rest of its prompt]; every prompt keeps at least its last
    token to run, for the logits.
    """
    counts.cached_tokens += sum(store.match(p[:-1]).length for p in prompts)
    shared = _shared_prefix_length(prompts)
    if shared and (done := store.match(prompts[0][:shared])).length < shared:
        head = decoder.allocate(1, shared)
        _write_prefix(head, 0, done)
        new_1_N = torch.tensor([prompts[0][done.length : shared]], device=device)
        decoder.forward(
            new_1_N,
            torch.arange(done.length, shared, device=device)[None],
            torch.ones_like(new_1_N, dtype=torch.bool),
            head,
        )
        counts.prefilled_tokens += shared - done.length
        store.insert(prompts[0][:shared], lambda start: _row_kv(head, 0, start, shared))
    found = [store.match(p[:-1]) for p in prompts]
    cached = [match.length for match in found]
    head_len = max(cached)
    cache = decoder.allocate(
        len(prompts), head_len + max(len(p) - c for p, c in zip(prompts, cached, strict=True)) + max_new
    )
    for row, match in enumerate(found):
        _write_prefix(cache, row, match)
    cache.length = head_len
    counts.prefilled_tokens += sum(len(p) - c for p, c in zip(prompts, cached, strict=True))
    logits_J_V, last_position_J = _prefill_rests(decoder, cache, prompts, cached, pad_token_id, device)
    for row, prompt in enumerate(prompts):
        store.insert(prompt, functools.partial(_row_kv, cache, row, end=len(prompt)))
    return cache, logits_J_V, last_position_J


def _prefill_rests(
    decoder, cache, prompts: list[list[int]], done: list[int], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run each prompt's tokens after its first done[j] (already in the cache) right-aligned in the next slots;
    return the last-position logits and each prompt's last position."""
    rest_len = max(len(p) - d for p, d in zip(prompts, done, strict=True))
    tokens_J_T = torch.full((len(prompts), rest_len), pad_token_id, dtype=torch.long)
    valid_J_T = torch.zeros((len(prompts), rest_len), dtype=torch.bool)
    for index, (prompt, start) in enumerate(zip(prompts, done, strict=True)):
        rest = prompt[start:]
        tokens_J_T[index, rest_len - len(rest) :] = torch.tensor(rest)
        valid_J_T[index, rest_len - len(rest) :] = True
    positions_J_T = torch.tensor(done)[:, None] + (valid_J_T.long().cumsum(-1) - 1).clamp(min=0)
    logits_J_V = decoder.forward(tokens_J_T.to(device), positions_J_T.to(device), valid_J_T.to(device), cache)
    return logits_J_V, positions_J_T[:, -1].to(device)


def _shared_prefix_length(prompts: list[list[int]]) -> int:
    """Leading tokens every prompt shares, run once for all (0 for one prompt, or fewer than _MIN_SHARED_PREFIX);
    every prompt keeps a token for the batched pass."""
    shared = common_prefix_length(prompts) if len(prompts) > 1 else 0
    shared = min(shared, min(len(p) for p in prompts) - 1)
    return shared if shared >= _MIN_SHARED_PREFIX else 0


def _write_prefix(cache: KVCache, row: int, match: PrefixMatch) -> None:
    """Copy a cached prefix's keys and values into the first slots of a cache row."""
    if not match.length:
        return
    kv_L_2_H_N_D = match.kv_L_2_H_N_D()
    for layer, (keys, values) in enumerate(zip(cache.keys, cache.values, strict=True)):
        keys[row, :, : match.length] = kv_L_2_H_N_D[layer, 0]
        values[row, :, : match.length] = kv_L_2_H_N_D[layer, 1]
    cache.key_valid_B_S[row, : match.length] = True
    cache.length = max(cache.length, match.length)


def _row_kv(cache: KVCache, row: int, start: int, end: int) -> torch.Tensor:
    """The keys and values of tokens start..end-1 of the sequence in a cache row (its real slots, in order), as a
    new [layers, 2, kv heads, tokens, head dim] tensor."""
    slots_N = cache.key_valid_B_S[row, : cache.length].nonzero().squeeze(-1)[start:end]
    return torch.stack(
        [
            torch.stack((keys[row].index_select(1, slots_N), values[row].index_select(1, slots_N)))
            for keys, values in zip(cache.keys, cache.values, strict=True)
        ]
    )


@torch.no_grad()
def generate(
    decoder: FastDecoder | HFDecoder,
    jobs: list[SampleJob],
    tokenizer,
    pad_token_id: int,
    abandoned: Sequence[Callable[[], bool]] = (),
    store: PrefixStore | None = None,
    counts: PrefillCounts | None = None,
) -> list[SampleResponse]:
    """Sample every job's completions in one batched decode loop.

    `abandoned[j]()` is asked before every decode step: once it is true, job j's rows stop there (its caller
    gave up: a cancelled request, a client that left), so a huge request stops costing at once. With a `store`
    (the fast decoder only), prompts are prefilled from the prefixes it holds, and every prompt and every
    finished row (prompt and completion) is stored for later requests. `counts` adds up what prefilling cost.
    """
    device = next(decoder.causal_lm.parameters()).device
    max_new = max(job.max_tokens for job in jobs)
    index_of_prompt: dict[tuple[int, ...], int] = {}  # a prompt several jobs share (a GRPO group's) is prefilled once
    prompt_of_job = [index_of_prompt.setdefault(tuple(job.prompt_tokens), len(index_of_prompt)) for job in jobs]
    prompts = [list(prompt) for prompt in index_of_prompt]
    counts = counts if counts is not None else PrefillCounts()
    counts.requests += len(jobs)
    counts.prompt_tokens += sum(len(job.prompt_tokens) for job in jobs)
    if store is not None:
        cache, logits_P_V, last_position_P = _prefill_from_store(
            decoder, prompts, max_new, pad_token_id, device, store, counts
        )
    else:
        cache, logits_P_V, last_position_P = _prefill(decoder, prompts, max_new, pad_token_id, device, counts)

    rows = [
        _Row(job=j, constraint=None if job.constraint is None else job.constraint.start())
        for j, job in enumerate(jobs)
        for _ in range(job.num_samples)
    ]
    row_generators = [g for job in jobs for g in job.generators]
    prompt_of_row = torch.tensor([prompt_of_job[row.job] for row in rows], device=device)
    cache.keep_rows(prompt_of_row)
    logits_R_V = logits_P_V.index_select(0, prompt_of_row)
    next_position_R = last_position_P.index_select(0, prompt_of_row) + 1
    live = list(range(len(rows)))  # row index of each cache row
    settings = _RowSettings.of([jobs[row.job].params for row in rows], device)
    finished_since_compaction = 0
    for _ in range(max_new):
        gone = {job for job, is_abandoned in enumerate(abandoned) if is_abandoned()}
        uniform_R = torch.cat([torch.rand(1, generator=row_generators[i]) for i in live]).to(device)
        logits_R_V, allowed_of_slot = _constrain(logits_R_V, rows, live)
        tokens_R, logprobs_R, behaviour_R = _draw(logits_R_V, settings, uniform_R)
        logprobs = logprobs_R.tolist()
        behaviours = logprobs if behaviour_R is None else behaviour_R.tolist()
        keep = []
        for slot, (row_index, token, logprob) in enumerate(zip(live, tokens_R.tolist(), logprobs, strict=True)):
            row = rows[row_index]
            if row.stop_reason is not None:  # finished, but its cache row is not dropped yet
                continue
            if row.job in gone:
                row.stop_reason = "length"
                finished_since_compaction += 1
                continue
            row.tokens.append(token)
            row.logprobs.append(logprob)
            row.behaviour_logprobs.append(behaviours[slot])
            if row.constraint is not None:
                row.allowed.append(allowed_of_slot[slot])
                row.constraint.advance(token)
            row.stop_reason = _stopped(row, jobs[row.job], tokenizer)
            if row.stop_reason is None:
                keep.append(slot)
            else:
                finished_since_compaction += 1
        if not keep:
            break
        if finished_since_compaction >= max(1, int(_COMPACT_FRACTION * len(live))):
            if store is not None:
                kept = set(keep)
                _store_rows(
                    store,
                    cache,
                    [(slot, row_index) for slot, row_index in enumerate(live) if slot not in kept],
                    rows,
                    jobs,
                )
            keep_slots = torch.tensor(keep, device=device)
            cache.keep_rows(keep_slots)
            tokens_R, next_position_R = tokens_R[keep_slots], next_position_R[keep_slots]
            live = [live[slot] for slot in keep]
            settings = _RowSettings.of([jobs[rows[i].job].params for i in live], device)
            finished_since_compaction = 0
        valid_R_1 = torch.ones((len(live), 1), dtype=torch.bool, device=device)
        logits_R_V = decoder.forward(tokens_R[:, None], next_position_R[:, None], valid_R_1, cache)
        next_position_R = next_position_R + 1
    if store is not None:
        _store_rows(store, cache, list(enumerate(live)), rows, jobs)

    responses, cursor = [], 0
    for job in jobs:
        sequences = [
            SampledSequence(
                stop_reason=row.stop_reason or "length",
                tokens=row.tokens,
                logprobs=row.logprobs,
                allowed_tokens=row.allowed if job.constraint else None,
                behaviour_logprobs=None if row.behaviour_logprobs == row.logprobs else row.behaviour_logprobs,
            )
            for row in rows[cursor : cursor + job.num_samples]
        ]
        cursor += job.num_samples
        responses.append(SampleResponse(sequences=sequences))
    return responses


def _store_rows(
    store: PrefixStore, cache: KVCache, slots: list[tuple[int, int]], rows: list[_Row], jobs: list[SampleJob]
) -> None:
    """Store each (cache slot, row index)'s prompt and completion, less the last token drawn (its keys and values
    were never computed; a finished row left in the batch may hold more, never less)."""
    for slot, row_index in slots:
        row = rows[row_index]
        sequence = jobs[row.job].prompt_tokens + row.tokens[:-1]
        store.insert(sequence, functools.partial(_row_kv, cache, slot, end=len(sequence)))
