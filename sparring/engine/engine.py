"""The local compute engine: one base model, many LoRA adapters, one worker.

`Engine` owns a loaded base model and its `AdapterBank`, and runs every
operation on a single worker thread in submission order, so calls made by one
client execute in the order they were made and the model is never touched
from two threads. Sampling requests are the exception to one-at-a-time: when
the worker reaches a sampling request it also takes every sampling request
queued right behind it (and those arriving within a short window) and runs
them as one batch per adapter. An inference request whose caller gave up
(its future cancelled) is skipped while queued and stops at the next decode
step while running, so an abandoned request costs nothing more. The keys and
values of prompts and completions stay in a `PrefixCache` (per adapter, and
emptied for it when its weights change), so a request that begins like an
earlier one prefills only its new tokens; `prefill_counts` adds up what
prefilling cost.
`get_engine` shares one engine per (model, device, dtype) in the process,
which is how several training clients share a base model in memory.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import PretrainedConfig

from ..models import LoadedModel, ModelSpec, load_base_model
from ..types import Datum, ModelInput, SampleResponse, SamplingParams
from .adapters import AdapterBank
from .constraints import ConstraintCompiler
from .decoder import DecoderPath, FastDecoder
from .learner import prepare_data, run_forward
from .prefix_cache import PrefillCounts, PrefixCache
from .sampler import SampleJob, generate

log = logging.getLogger(__name__)


class EngineConfig(BaseModel):
    """How the engine places and runs the model."""

    model_config = ConfigDict(extra="forbid")

    device: str = "cpu"
    """torch device for the model ('cpu', 'cuda', 'cuda:1')."""
    dtype: str | None = None
    """Weights dtype; None means float32 on CPU and bfloat16 on CUDA."""
    learner_token_budget: int | None = Field(default=None, ge=1)
    """Most tokens per forward/backward micro-batch, counted as trie nodes or padded tokens; None means 4096 on CPU
    and 1024 on CUDA. Activation memory grows with it (~1.7 MB a node for SmolLM2 in float32; ~5 MB for a 7B model
    in bfloat16); fewer, larger micro-batches compute the prefixes their datums share fewer times."""
    learner_prefix_tree: bool = True
    """Forward/backward runs each micro-batch as a trie of its datums (`prefix_tree`): every prefix they share (a GRPO
    group's prompt, the turns several episodes played alike) is computed once, the same results up to float
    rounding; `make demo`'s recorded steps train 1.4-2.9x faster than with one shared prefix per micro-batch. Llama
    and Qwen models only; off (or other models) runs every datum whole, padded side by side."""
    default_max_tokens: int = Field(default=256, ge=1)
    """max_tokens for sampling requests that give none."""
    batch_window_s: float = Field(default=0.01, ge=0.0)
    """How long the worker waits for one more request to join a batch (restarted on each arrival)."""
    max_batch_wait_s: float = Field(default=0.1, ge=0.0)
    """Longest a batch waits for requests to join it."""
    max_batch_rows: int = Field(default=64, ge=1)
    """Most sequences decoded together in one batch."""
    merge_lora_for_sampling: bool | None = None
    """Fold the adapter into the base weights while sampling; None means on for float32."""
    fast_decoder: bool = True
    """Use the preallocated-cache decoder for Llama-family models."""
    prefix_cache_mib: float = Field(default=1024, ge=0)
    """Memory for the keys and values of prompts and completions kept across sampling requests (`prefix_cache`), so a
    later prompt that begins with one prefills only its new tokens; 0 turns it off. On the model's device: ~45 KiB a
    token for SmolLM2-135M in float32 (the default 1024 holds ~23k tokens). Llama-family models (the fast decoder)
    only. Measured faster on every load tried (werewolf, twenty questions and guess-the-number evaluations,
    `make demo`'s rollouts: benchmarks/README.md)."""
    pack_cpu_weights: bool = True
    """On CPU in float32, the fast decoder samples through oneDNN-packed copies of the weights with the adapter folded
    in, kept until the weights change: decode steps 1.3-2x faster on a 2-core machine, and sampling never writes the
    base weights (no merge), for the model's size again in memory per adapter sampled (the last three kept: base
    model, policy, snapshot opponent). The learner's fused ops multiply by packed copies of the frozen weights and
    their transposes too: forward+backward 1.3-1.4x faster, for twice the model's size. Off to save that memory."""
    sampler_cpu_kernels: bool = True
    """On CPU in float32 the fast decoder runs sparring's compiled AVX2 kernels (`cpu_kernels`): its matmuls (with
    `pack_cpu_weights`, on plain copies, the adapter folded in) read the weights while they multiply, where oneDNN's
    packed kernels read, then multiply; RMSNorm in one pass; a decode step's attention in one pass over the cache; for
    Llama-style layers, each layer of a decode step in one call. Sampling SmolLM2-135M 1.4-1.8x faster at 8 and 32 rows
    on the 2-core AMD machine, and the base model's lone weights need no copy. Built once with the system's C
    compiler (~1 s); where they cannot run (no AVX2, no
    compiler) the reason is logged and oneDNN's copies and torch's ops are used. Off for those."""
    fused_learner_ops: bool = True
    """Forward/backward computes each LoRA layer and the LM head's target logprobs as one autograd op
    (`lora_matmul`, `target_logprobs`), and on CPU in float32, where `cpu_kernels` run, a Llama-style layer's RMSNorm,
    rotary and SwiGLU too (`learner_layers`): the same results up to float rounding, faster for less memory. Off runs
    peft's layers, transformers' and `log_softmax` (the reference the fused ops are tested against)."""

    def token_budget(self) -> int:
        """`learner_token_budget`, or its default for the device."""
        if self.learner_token_budget is not None:
            return self.learner_token_budget
        return 4096 if torch.device(self.device).type == "cpu" else 1024


@dataclass
class _SampleRequest:
    adapter: str | None
    job: SampleJob
    future: Future = field(default_factory=Future)


@dataclass
class _ScoreRequest:
    adapter: str | None
    tokens: list[int]
    future: Future = field(default_factory=Future)


@dataclass
class _Call:
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)


class Engine:
    """A base model, its adapters, and the worker that runs operations on them."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.loaded = loaded
        self.config = config
        self.bank = AdapterBank(loaded.model, loaded.spec.name, loaded.hf_dir)
        self.decoder_path = DecoderPath.of(
            loaded.model, config.fast_decoder, config.pack_cpu_weights, config.sampler_cpu_kernels
        )
        """Which decoder samples, decided once (sampling builds it; whether inference merges the adapter reads it)."""
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.optimizer_steps: collections.Counter[str] = collections.Counter()
        self._names = itertools.count()
        self._queue: collections.deque = collections.deque()
        self._wakeup = threading.Condition()
        self._seed_source = torch.Generator().manual_seed(0x5EED)
        self.constraints = ConstraintCompiler(loaded.tokenizer, self.vocab_size)
        self.prefix_cache = PrefixCache(int(config.prefix_cache_mib * 2**20)) if config.prefix_cache_mib > 0 else None
        self.prefill_counts = PrefillCounts()
        """What sampling prompts cost to prefill since the engine started (read it for metrics; the worker adds to
        it)."""
        self._worker = threading.Thread(target=self._run, name="sparring-engine", daemon=True)
        self._worker.start()

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.loaded.model.get_input_embeddings().weight.shape[0]

    @property
    def max_context(self) -> int:
        return int(getattr(self.loaded.model.config, "max_position_embeddings", 4096))

    @property
    def model_spec(self) -> ModelSpec:
        """Where the base model came from (catalogue name or path, and its kind)."""
        return self.loaded.spec

    @property
    def model_config(self) -> PretrainedConfig:
        """The base model's transformers config."""
        return self.loaded.model.config

    @property
    def model_dir(self) -> str:
        """The base model's `name_or_path`: the directory its weights and tokenizer were read from."""
        return str(self.loaded.model.name_or_path)

    @property
    def linear_groups(self) -> dict[str, set[str]]:
        """The base model's linear layers by the group adapters train them in ('attn', 'mlp', 'unembed')."""
        return self.bank.linear_groups

    @property
    def _merge(self) -> bool:
        """Whether inference folds the adapter into the base weights: not where the fast decoder packs its weights
        (it folds the adapter into its packed copies instead)."""
        if self.decoder_path.folds_adapter:
            return False
        merge = self.config.merge_lora_for_sampling
        return self.loaded.dtype == torch.float32 if merge is None else merge

    def reseed(self, seed: int) -> None:
        """Restart the stream that seeds requests without a seed (a resumed run then samples as the original did)."""
        self._seed_source.manual_seed(seed)

    def new_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._names)}"

    # Submission -----------------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run fn on the worker after everything submitted before it."""
        return self._put(_Call(fn))

    def sample(self, adapter: str | None, prompt_tokens: list[int], num_samples: int, params: SamplingParams) -> Future:
        job = self._make_job(prompt_tokens, num_samples, params)
        return self._put(_SampleRequest(adapter, job))

    def score(self, adapter: str | None, tokens: list[int]) -> Future:
        """log p(token_i | tokens_<i) for each token (None for the first); batched with other score requests."""
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt has token ids out of the vocabulary [0, {self.vocab_size}): {bad[:5]}")
        return self._put(_ScoreRequest(adapter, list(tokens)))

    def release(self, adapter: str) -> Future:
        """Delete an adapter and its optimizer state, after everything submitted before (its queued work still runs)."""

        def drop() -> None:
            if self.prefix_cache is not None:
                self.prefix_cache.forget(adapter)
            self.bank.delete(adapter)
            self.optimizers.pop(adapter, None)
            self.optimizer_steps.pop(adapter, None)

        return self.call(drop)

    def set_prefix_cache(self, mib: float) -> Future:
        """Give the prefix cache `mib` MiB (0 turns it off), starting empty, after everything submitted before."""
        if mib < 0:
            raise ValueError(f"prefix cache size must be >= 0 MiB, got {mib}")
        self.config = self.config.model_copy(update={"prefix_cache_mib": mib})  # at once: the budget last asked for
        return self.empty_prefix_cache()

    def empty_prefix_cache(self) -> Future:
        """Drop every cached prefix (same budget), after everything submitted before: a training step starts from an
        empty cache, so a resumed run samples its first step exactly as the uninterrupted run did."""
        mib = self.config.prefix_cache_mib
        return self.call(lambda: self._new_prefix_cache(mib))

    def _new_prefix_cache(self, mib: float) -> None:
        self.prefix_cache = PrefixCache(int(mib * 2**20)) if mib > 0 else None

    def _put(self, item) -> Future:
        with self._wakeup:
            self._queue.append(item)
            self._wakeup.notify()
        return item.future

    def _make_job(self, prompt_tokens: list[int], num_samples: int, params: SamplingParams) -> SampleJob:
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if not prompt_tokens:
            raise ValueError("prompt is empty")
        bad = [t for t in prompt_tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt has token ids out of the vocabulary [0, {self.vocab_size}): {bad[:5]}")
        room = self.max_context - len(prompt_tokens)
        if room < 1:
            raise ValueError(f"prompt has {len(prompt_tokens)} tokens; the model's context is {self.max_context}")
        max_tokens = min(params.max_tokens or self.config.default_max_tokens, room)
        stop = params.stop
        default_stops = frozenset(self.loaded.renderer.stop_token_ids)
        if stop is None:
            stop_ids, stop_strings = default_stops, ()
        elif isinstance(stop, str):
            stop_ids, stop_strings = default_stops, (stop,)
        elif all(isinstance(s, str) for s in stop):
            stop_ids, stop_strings = (default_stops if stop else frozenset()), tuple(stop)
        else:
            stop_ids, stop_strings = frozenset(int(s) for s in stop), ()
        if params.seed is not None:
            seeds = [params.seed * 1_000_003 + index for index in range(num_samples)]
        else:
            seeds = torch.randint(0, 2**62, (num_samples,), generator=self._seed_source).tolist()
        generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        constraint = None
        if params.constraint is not None:
            constraint = self.constraints.compile(params.constraint.model_dump_json(), stop_ids)
            if constraint.longest is not None and max_tokens < constraint.longest:
                raise ValueError(
                    f"max_tokens is {max_tokens}, but the longest of the choices takes "
                    f"{constraint.longest} tokens (its stop token included)"
                )
        return SampleJob(
            list(prompt_tokens), num_samples, params, stop_ids, stop_strings, max_tokens, generators, constraint
        )

    # Worker ---------------------------------------------------------------

    def _next(self):
        with self._wakeup:
            while not self._queue:
                self._wakeup.wait()
            return self._queue.popleft()

    def _take_batch(self, first):
        """`first` plus the requests of its kind queued behind it, waiting while more keep arriving.

        Concurrent episodes submit their next calls a few milliseconds apart (each renders its prompt first), so
        the wait restarts on every arrival (`batch_window_s`), up to `max_batch_wait_s` in all.
        """
        kind, batch = type(first), [first]
        rows = _rows(first)
        started = time.monotonic()
        deadline = started + self.config.batch_window_s
        with self._wakeup:
            while rows < self.config.max_batch_rows:
                if self._queue and isinstance(self._queue[0], kind):
                    request = self._queue.popleft()
                    batch.append(request)
                    rows += _rows(request)
                    deadline = min(
                        time.monotonic() + self.config.batch_window_s, started + self.config.max_batch_wait_s
                    )
                    continue
                remaining = deadline - time.monotonic()
                if self._queue or remaining <= 0:
                    break
                self._wakeup.wait(remaining)
        return batch

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            if isinstance(item, _Call):
                # Every operation that is not inference may touch LoRA weights: never run it merged.
                self.bank.unmerge()
                _settle(item.future, item.fn)
                continue
            by_adapter: dict[str | None, list] = {}
            for request in self._take_batch(item):
                if request.future.cancelled():  # its caller gave up while it was queued: never computed
                    continue
                by_adapter.setdefault(request.adapter, []).append(request)
            run = self._generate if isinstance(item, _SampleRequest) else self._score
            for adapter, requests in by_adapter.items():
                try:
                    results = run(adapter, requests)
                except BaseException as error:  # noqa: BLE001 - delivered to every waiting caller
                    for request in requests:
                        _deliver(request.future, error=error)
                    continue
                for request, result in zip(requests, results, strict=True):
                    _deliver(request.future, result)

    def close(self) -> None:
        """Stop the worker once its current operation ends; queued work is cancelled."""
        with self._wakeup:
            for item in self._queue:
                if item is not None:
                    item.future.cancel()
            self._queue.clear()
            self._queue.append(None)
            self._wakeup.notify()
        self._worker.join()

    def _score(self, adapter: str | None, requests: list[_ScoreRequest]) -> list[list[float | None]]:
        scored = [r for r in requests if len(r.tokens) >= 2]
        logprobs = {}
        if scored:
            data = [_scoring_datum(r.tokens) for r in scored]
            with self.bank.inference(adapter, self._merge):
                output = run_forward(
                    self.bank.base_model,
                    prepare_data(data, "cross_entropy", self.vocab_size),
                    "cross_entropy",
                    {},
                    backward=False,
                    token_budget=self.config.token_budget(),
                    prefix_tree=self.config.learner_prefix_tree,
                    fused=self.config.fused_learner_ops,
                    pack_weights=self.config.pack_cpu_weights,
                )
            logprobs = {id(r): out["logprobs"].tolist() for r, out in zip(scored, output.loss_fn_outputs, strict=True)}
        return [[None, *logprobs.get(id(r), [])][: len(r.tokens)] for r in requests]

    def _generate(self, adapter: str | None, requests: list[_SampleRequest]) -> list[SampleResponse]:
        jobs = [request.job for request in requests]
        with self.bank.inference(adapter, self._merge):
            decoder = self.decoder_path.build(self.bank.base_model)
            store = None
            if self.prefix_cache is not None and isinstance(decoder, FastDecoder):
                store = self.prefix_cache.store(adapter, self.bank.fingerprint(adapter))
            abandoned = [request.future.cancelled for request in requests]
            return generate(
                decoder, jobs, self.tokenizer, self.tokenizer.pad_token_id, abandoned, store, self.prefill_counts
            )


def _rows(request) -> int:
    return request.job.num_samples if isinstance(request, _SampleRequest) else 1


def _scoring_datum(tokens: list[int]) -> Datum:
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0]}
    )


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        result = fn()
    except BaseException as error:  # noqa: BLE001 - the caller gets the error through its future
        _deliver(future, error=error)
    else:
        _deliver(future, result)


def _deliver(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    # A caller that gave up (timeout, cancelled task) cancelled its future: drop the result, keep the worker alive.
    if future.cancelled():
        return
    try:
        future.set_exception(error) if error is not None else future.set_result(result)
    except InvalidStateError:
        pass


_ENGINES: dict[tuple, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def get_engine(base_model: str, config: EngineConfig | None = None) -> Engine:
    """The process-wide engine for this base model and placement, loading it on first use. Its one prefix cache takes
    the budget of the latest call that asks for another (a second run in the same process gets the cache it
    configured); any other setting stays the first call's, with a warning naming what was not applied."""
    config = config or EngineConfig()
    key = (base_model, config.device, config.dtype)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = Engine(load_base_model(base_model, device=config.device, dtype=config.dtype), config)
            return _ENGINES[key]
        engine = _ENGINES[key]
        if engine.config.prefix_cache_mib != config.prefix_cache_mib:
            engine.set_prefix_cache(config.prefix_cache_mib)
        ignored = sorted(
            name
            for name in type(config).model_fields
            if name != "prefix_cache_mib" and getattr(config, name) != getattr(engine.config, name)
        )
        if ignored:
            log.warning(
                "the engine for %s is already loaded with other %s; it keeps them (one engine per model and placement)",
                base_model,
                ", ".join(ignored),
            )
        return engine


@atexit.register
def _close_engines() -> None:
    # Stop workers before the interpreter tears down torch under a running thread.
    for engine in _ENGINES.values():
        engine.close()
