"""Helpers shared by the benchmarks: the matmul ceiling, model size, prompts, tables, and a step's matmuls alone.

The matmul ceiling is the FLOP rate of one large fp32 `torch.matmul` with the
threads torch uses, measured in the same process as the benchmark (the
machine is shared, so a ceiling from another run would not be comparable).
Achieved model FLOP rates are reported as a fraction of it, and, where it
applies, of the same matmul through a oneDNN-packed weight (higher on the
project machine, and what sparring's CPU sampler uses).

A step's matmuls alone, as sparring runs them, are what its own kernels cannot
go below: `decode_matmul_seconds` for a decode step's weight matmuls,
`learner_matmul_seconds` for a GRPO batch's forward+backward, whose every
matmul call (`MatmulRecorder`: operation, operand shapes and strides) is
replayed alone on fresh tensors of the same layout.
"""

from __future__ import annotations

import collections
import functools
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SHORT_USER_PROMPTS = [
    "Tell me a fun fact about octopuses.",
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain photosynthesis in one sentence.",
    "Give me three names for a pet cat.",
    "How do I boil an egg?",
    "What is 17 times 23?",
    "Suggest a title for a mystery novel.",
    "Why is the sky blue?",
    "Describe a sunset to someone who cannot see.",
    "What should I pack for a beach trip?",
    "Summarise the plot of Cinderella.",
    "Name a famous physicist and what they discovered.",
    "How do plants drink water?",
    "Write a limerick about a cat.",
    "What is the tallest mountain on Earth?",
]


def best_seconds(run, repeats: int) -> float:
    """The shortest of `repeats` timed calls of `run`, after one untimed call."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_ceiling_gflops(size: int = 2048, repeats: int = 5) -> float:
    """Best fp32 GFLOP/s of a size x size x size matmul over `repeats` runs."""
    left_N_N = torch.randn(size, size)
    right_N_N = torch.randn(size, size)
    return 2 * size**3 / best_seconds(lambda: torch.matmul(left_N_N, right_N_N), repeats) / 1e9


def packed_matmul_ceiling_gflops(size: int = 2048, repeats: int = 5) -> float | None:
    """Best fp32 GFLOP/s of the same matmul through a oneDNN-packed weight (what sparring's CPU sampler multiplies
    with; faster than `torch.matmul` here), or None without oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return None
    left_N_N = torch.randn(size, size)
    packed_N_N = torch.ops.mkldnn._reorder_linear_weight(torch.randn(size, size))
    return (
        2
        * size**3
        / best_seconds(lambda: torch.ops.mkldnn._linear_pointwise(left_N_N, packed_N_N, None, "none", [], ""), repeats)
        / 1e9
    )


def matmul_parameter_count(model: torch.nn.Module) -> int:
    """Base-model parameters, each used in one matmul per token (the LM head counted once even when tied to the
    embeddings); LoRA weights left out."""
    return sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)


def matmul_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The base model's 2-D weights (each tensor once, LoRA weights left out): what a decode step multiplies by."""
    return [p.detach() for name, p in model.named_parameters() if p.dim() == 2 and "lora_" not in name]


@torch.no_grad()
def weight_read_seconds(model: torch.nn.Module, repeats: int = 10) -> float:
    """The best time to read every weight of `model` once (a sum over each): no decode step can take less when the
    weights do not fit in the cache, since a step multiplies by every one of them."""
    weights = matmul_weights(model)
    return best_seconds(lambda: [w.sum() for w in weights], repeats)


@torch.no_grad()
def decode_matmul_seconds(model: torch.nn.Module, rows: int, repeats: int = 10, cpu_kernels: bool = True) -> float:
    """The best time of one decode step's weight matmuls alone at `rows` rows, run as sparring's sampler runs them
    (the fast decoder's fused projections of every layer, then the LM head; on CPU through packed copies, for the row
    kernel or, with `cpu_kernels=False`, for oneDNN)."""
    from sparring.engine.decoder import make_decoder

    decoder = make_decoder(model, cpu_kernels=cpu_kernels)
    config = model.config
    hidden_R_H = torch.randn(rows, config.hidden_size)
    attention_R_A = torch.randn(rows, config.num_attention_heads * decoder.head_dim)
    intermediate_R_I = torch.randn(rows, config.intermediate_size)

    def matmuls():
        for layer in decoder.layers:
            (
                layer.qkv_proj(hidden_R_H),
                layer.o_proj(attention_R_A),
                layer.gate_up_proj(hidden_R_H),
                layer.down_proj(intermediate_R_I),
            )
        decoder.lm_head(hidden_R_H)

    return best_seconds(matmuls, repeats)


def grpo_data(prompts: list[list[int]], group_size: int, completion_tokens: int, vocab_size: int) -> list:
    """`group_size` random completions of every prompt, advantage +-1 on the completion, sampler logprobs -2."""
    from sparring import types

    generator = torch.Generator().manual_seed(1)
    data = []
    for prompt in prompts:
        for member in range(group_size):
            tokens = prompt + torch.randint(0, vocab_size, (completion_tokens,), generator=generator).tolist()
            advantage = 1.0 if member % 2 else -1.0
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": tokens[1:],
                        "logprobs": [-2.0] * (len(tokens) - 1),
                        "advantages": [0.0] * (len(prompt) - 1) + [advantage] * completion_tokens,
                    },
                )
            )
    return data


@dataclass(frozen=True)
class TensorLayout:
    """What a recorded matmul operand looked like: enough to make a fresh tensor laid out the same."""

    shape: tuple[int, ...]
    """Its sizes."""
    stride: tuple[int, ...]
    """Its strides (a transposed view multiplies differently from a contiguous tensor)."""
    dtype: torch.dtype
    """Its element type."""

    def fresh(self) -> torch.Tensor:
        storage = (
            1 + sum((size - 1) * stride for size, stride in zip(self.shape, self.stride, strict=True))
            if all(self.shape)
            else 0
        )
        return torch.randn(storage, dtype=self.dtype).as_strided(self.shape, self.stride)


@dataclass(frozen=True)
class PackedWeightLayout:
    """A oneDNN-packed weight (`packed_weights`), which has sizes but no strides: packed afresh to replay."""

    shape: tuple[int, ...]
    """Its sizes, [out, in]."""

    def fresh(self) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(torch.randn(self.shape))


class MatmulRecorder(TorchDispatchMode):
    """Counts every matmul call made under it, by operation and operand layouts (what `replay_seconds` re-runs)."""

    LINEAR = torch.ops.mkldnn._linear_pointwise.default
    """x @ W^T through a packed weight: its second operand is [out, in]."""
    OPERATIONS = {
        torch.ops.aten.mm.default,
        torch.ops.aten.mm.out,
        torch.ops.aten.addmm.default,
        torch.ops.aten.addmm.out,
        torch.ops.aten.addmm_.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.baddbmm.default,
        LINEAR,
    }

    def __init__(self):
        super().__init__()
        self.calls: collections.Counter = collections.Counter()
        """(operation, positional arguments, keyword arguments), tensors as `TensorLayout`s: how often it ran."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.OPERATIONS:
            self.calls[
                (func, tuple(map(_layout, args)), tuple((key, _layout(value)) for key, value in sorted(kwargs.items())))
            ] += 1
        return func(*args, **kwargs)

    def flops(self) -> float:
        """Multiply-adds x 2 of every recorded call."""
        total = 0.0
        for (func, args, _kwargs), count in self.calls.items():
            if func is self.LINEAR:
                first, second = args[:2]
                total += 2 * count * torch.Size(first.shape).numel() * second.shape[0]
            else:
                first, second = [a for a in args if isinstance(a, TensorLayout)][-2:]
                total += 2 * count * torch.Size(first.shape).numel() * second.shape[-1]
        return total

    def replay_seconds(self, repeats: int) -> float:
        """Every recorded call's best time alone on fresh tensors of its layouts, times how often it ran, summed."""
        total = 0.0
        for (func, args, kwargs), count in self.calls.items():
            fresh_args = [
                a.fresh()
                if isinstance(a, (TensorLayout, PackedWeightLayout))
                else list(a)
                if isinstance(a, tuple)
                else a
                for a in args
            ]
            fresh_kwargs = {
                key: value.fresh() if isinstance(value, (TensorLayout, PackedWeightLayout)) else value
                for key, value in kwargs
            }
            total += count * best_seconds(functools.partial(func, *fresh_args, **fresh_kwargs), repeats)
        return total


def _layout(value):
    if isinstance(value, torch.Tensor):
        return (
            PackedWeightLayout(tuple(value.shape))
            if value.is_mkldnn
            else TensorLayout(tuple(value.shape), tuple(value.stride()), value.dtype)
        )
    return tuple(value) if isinstance(value, list) else value  # hashable: _linear_pointwise takes a list of scalars


def learner_matmul_seconds(
    base_model: str, questions: list[str], group_size: int, completion_tokens: int, repeats: int = 10
) -> tuple[float, float]:
    """The best time of a GRPO batch's forward+backward matmuls alone, and their GFLOP: every matmul call of one real
    forward+backward of sparring's learner (`MatmulRecorder`; ppo, LoRA r=16 on every projection; `group_size`
    random completions of `completion_tokens` tokens to each chat-rendered question), each replayed alone."""
    from sparring import ServiceClient
    from sparring.engine import operations

    client = ServiceClient(base_dir=tempfile.mkdtemp(prefix="sparring-floors-")).create_lora_training_client(
        base_model, rank=16, seed=0
    )
    engine, renderer = client.engine, client.get_renderer()
    prompts = [renderer.render([{"role": "user", "content": question}]) for question in questions]
    data = grpo_data(prompts, group_size, completion_tokens, engine.vocab_size)
    recorder = MatmulRecorder()

    def record_and_replay() -> float:  # on the engine's own thread (and its torch threads), where its learner runs
        with recorder:
            operations.forward_backward(engine, client.adapter, data, "ppo", None, True)
        return recorder.replay_seconds(repeats)

    try:
        return engine.call(record_and_replay).result(), recorder.flops() / 1e9
    finally:  # the engine is the process's: leave it without this adapter
        engine.release(client.adapter).result()


def chat_prompts(renderer, count: int) -> list[list[int]]:
    """`count` chat-rendered short user prompts (cycling through SHORT_USER_PROMPTS)."""
    return [
        renderer.render([{"role": "user", "content": SHORT_USER_PROMPTS[i % len(SHORT_USER_PROMPTS)]}])
        for i in range(count)
    ]


def resolve_model_name(name: str, quick: bool) -> str:
    """The model to benchmark: a tiny random model built in a temporary directory when quick."""
    if not quick:
        return name
    from sparring.models import build_tiny_model

    return str(build_tiny_model(Path(tempfile.mkdtemp(prefix="sparring-bench-")) / "tiny", seed=0))


def print_table(headers: list[str], rows: list[list]) -> None:
    """A plain-text table with right-aligned columns."""
    cells = [headers] + [
        [
            f"{c:.3g}" if isinstance(c, float) and abs(c) < 10 else f"{c:.0f}" if isinstance(c, float) else str(c)
            for c in row
        ]
        for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))
