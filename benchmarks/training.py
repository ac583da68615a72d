"""Training throughput: LoRA forward+backward through the training client.

An RL step on a CPU is sampling plus this: one forward_backward over the
rollouts. Two losses are timed on the same batch of sequences (default
8 x (192 prompt + 64 completion) tokens, LoRA r=16 on attention and MLP):

- cross_entropy with weight 1 on every token: the LM head runs with gradient
  at every position (supervised fine-tuning);
- ppo with non-zero advantages on the completion tokens only (the RL case):
  the learner applies the LM head with gradient only there, and without
  gradient at the prompt positions.

Model FLOPs per token: forward 2N and backward with respect to activations
2N, so 4N for cross_entropy, where N counts every weight used in a matmul
(the LM head once, even when tied to the embeddings). The base weights are
frozen, so no weight gradients are computed for them; LoRA weight gradients
and attention are left out. For ppo the head's backward runs only at the
completion positions: 2N + 2(N - N_head) + 2 N_head x completion share.
The achieved rate is shown as a fraction of the fp32 matmul ceiling
measured in the same run. Each timing is the best of `--repeats`, after one
warm-up; the two losses alternate so that load from other processes hits
both alike.

A second table times the shape a GRPO step trains: `--groups` chat prompts x
`--group-size` completions of `--completion-tokens` each, ppo, with the
learner running the batch as prefix trees, so each shared prompt runs once
(`EngineConfig.learner_prefix_tree`, the default), the same with
the fused ops multiplying by the plain weights (MKL) instead of oneDNN-packed
copies (`EngineConfig.pack_cpu_weights = False`), with peft's LoRA layers and
`log_softmax` instead of the fused ops (`EngineConfig.fused_learner_ops =
False`), and with every datum run whole (`learner_prefix_tree = False`),
alternating.

    .venv/bin/python benchmarks/training.py [--batch 8] [--prompt-tokens 192] [--completion-tokens 64] [--groups 4] \\
        [--group-size 8] [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from common import (
    chat_prompts,
    grpo_data,
    matmul_ceiling_gflops,
    matmul_parameter_count,
    print_table,
    resolve_model_name,
)

from sparring import ServiceClient, types

LORA_RANK = 16


def sequences(batch: int, length: int, vocab_size: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (batch, length), generator=generator).tolist()


def cross_entropy_data(tokens: list[list[int]]) -> list[types.Datum]:
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(row[:-1]),
            loss_fn_inputs={"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)},
        )
        for row in tokens
    ]


def ppo_data(tokens: list[list[int]], completion_tokens: int, sampler_logprobs: list[list[float]]) -> list[types.Datum]:
    """Advantage 1 on the completion's targets, 0 on the prompt's; logprobs as the sampler would have reported them."""
    data = []
    for row, logprobs in zip(tokens, sampler_logprobs, strict=True):
        targets = len(row) - 1
        advantages = [0.0] * (targets - completion_tokens) + [1.0] * completion_tokens
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={"target_tokens": row[1:], "logprobs": logprobs, "advantages": advantages},
            )
        )
    return data


def time_forward_backward(training_client, data: list[types.Datum], loss_fn: str) -> float:
    start = time.perf_counter()
    training_client.forward_backward(data, loss_fn).result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=192)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--groups", type=int, default=4, help="GRPO table: prompts")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO table: completions per prompt")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3, help="timings per loss; the best is kept")
    parser.add_argument(
        "--quick", action="store_true", help="tiny random model, batch 2 x (24 + 8) tokens: a smoke test"
    )
    args = parser.parse_args()
    if args.quick:
        args.batch, args.prompt_tokens, args.completion_tokens, args.groups, args.group_size = 2, 24, 8, 2, 2
    model_name = resolve_model_name(args.model, args.quick)
    load_before = os.getloadavg()[0]
    ceiling = matmul_ceiling_gflops(512 if args.quick else 2048)

    service = ServiceClient(base_dir=tempfile.mkdtemp(prefix="sparring-bench-"))
    training_client = service.create_lora_training_client(model_name, rank=LORA_RANK, seed=0)
    engine = training_client.engine
    model = engine.loaded.model
    length = args.prompt_tokens + args.completion_tokens
    tokens = sequences(args.batch, length, engine.vocab_size)

    cross_entropy = cross_entropy_data(tokens)
    scored = training_client.forward(cross_entropy, "cross_entropy").result()
    sampler_logprobs = [output["logprobs"].tolist() for output in scored.loss_fn_outputs]
    losses = {"cross_entropy": cross_entropy, "ppo": ppo_data(tokens, args.completion_tokens, sampler_logprobs)}
    for loss_fn, data in losses.items():
        time_forward_backward(training_client, data, loss_fn)

    best = {loss_fn: float("inf") for loss_fn in losses}
    for _ in range(args.repeats):
        for loss_fn, data in losses.items():
            best[loss_fn] = min(best[loss_fn], time_forward_backward(training_client, data, loss_fn))
    start = time.perf_counter()
    training_client.optim_step(types.AdamParams(learning_rate=1e-4)).result()
    optim_step_s = time.perf_counter() - start

    parameters = matmul_parameter_count(model)
    head_parameters = model.get_output_embeddings().weight.numel()
    completion_share = args.completion_tokens / (length - 1)
    flops_per_token = {
        "cross_entropy": 4 * parameters,
        "ppo": 2 * parameters + 2 * (parameters - head_parameters) + 2 * head_parameters * completion_share,
    }
    tokens_per_step = args.batch * (length - 1)

    print(
        f"\nLoRA forward+backward on {model_name}: batch {args.batch} x {length - 1} tokens "
        f"({args.prompt_tokens} prompt + {args.completion_tokens} completion), LoRA r={LORA_RANK}, torch "
        f"threads {torch.get_num_threads()}"
    )
    print(
        f"fp32 matmul ceiling: {ceiling:.0f} GFLOP/s; N = {parameters / 1e6:.1f} M matmul parameters (LM "
        f"head {head_parameters / 1e6:.1f} M)"
    )
    print(
        f"optim_step (Adam over the LoRA weights): {optim_step_s * 1e3:.0f} ms; 1-minute load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n"
    )
    rows = []
    for loss_fn in losses:
        rate = tokens_per_step / best[loss_fn]
        gflops = flops_per_token[loss_fn] * rate / 1e9
        rows.append([loss_fn, best[loss_fn], rate, flops_per_token[loss_fn] / 1e9, gflops, gflops / ceiling])
    print_table(["loss", "seconds", "tokens/s", "GFLOP/token", "GFLOP/s", "of ceiling"], rows)

    grpo = grpo_data(
        chat_prompts(engine.loaded.renderer, args.groups), args.group_size, args.completion_tokens, engine.vocab_size
    )
    grpo_tokens = sum(datum.model_input.length for datum in grpo)
    defaults = engine.config.model_copy()
    settings = {  # (learner_prefix_tree, fused_learner_ops, pack_cpu_weights)
        "prefix trees: each prompt run once": (True, True, True),
        "... through the plain weights (MKL)": (True, True, False),
        "... with peft's LoRA layers and log_softmax": (True, False, False),
        "every datum whole": (False, True, True),
    }
    grpo_best = {label: float("inf") for label in settings}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for label, (tree, fused, pack) in settings.items():
            engine.config.learner_prefix_tree, engine.config.fused_learner_ops, engine.config.pack_cpu_weights = (
                tree,
                fused,
                pack,
            )
            seconds = time_forward_backward(training_client, grpo, "ppo")
            if repeat:
                grpo_best[label] = min(grpo_best[label], seconds)
    engine.config = defaults
    print(
        f"\nGRPO-shaped batch, ppo: {args.groups} prompts x {args.group_size} completions of "
        f"{args.completion_tokens} tokens, {grpo_tokens} datum tokens\n"
    )
    print_table(
        ["learner", "seconds", "datum tokens/s", "the first row's speed-up"],
        [
            [label, best, grpo_tokens / best, best / grpo_best["prefix trees: each prompt run once"]]
            for label, best in grpo_best.items()
        ],
    )


if __name__ == "__main__":
    main()
