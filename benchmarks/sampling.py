"""Sampling throughput: sparring's engine against Hugging Face `generate`.

RL on a CPU spends most of its time sampling rollouts, so this measures the
sampling path a training loop uses — an in-flight sampling client of a LoRA
training client (r=16), many concurrent `sample` calls batched by the engine —
against the obvious alternative, `model.generate` on a left-padded batch, with
the same LoRA adapter attached unmerged through peft and without one; and
the engine's path again with its decode matmuls through oneDNN's packed
weights and torch's ops instead of sparring's compiled kernels
(`EngineConfig.sampler_cpu_kernels`).

Every path samples at temperature 1 with no top-k/top-p and exactly
`--new-tokens` tokens per row (stop=[] for sparring, min_new_tokens for
`generate`), from the same chat-rendered short user prompts, at each batch
size. Each path is warmed up once; each timing is the best of `--repeats`,
with the paths alternating.
tokens/s counts generated tokens only. The achieved model FLOP rate is
2 x parameters x tokens/s (prefill and attention left out), shown as a
fraction of the fp32 matmul ceiling measured in the same run (`torch.matmul`,
and the higher rate of a matmul through a oneDNN-packed weight). Below the
table, what a decode step cannot go below on this host: the time to read
every weight once (decoding streams them all each step), and the step's
weight matmuls alone as the sampler runs them (sparring's kernel, and oneDNN for
comparison), at each batch size, with the
share of the ceiling that rate would be and of a sampled step it is, beside
the two bounds a kernel could meet: the longer of reading the weights and
multiplying them at the ceiling (it overlaps the two), or their sum (it
does one, then the other).

    .venv/bin/python benchmarks/sampling.py [--batches 1,8,32] [--new-tokens 64] [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from common import (
    chat_prompts,
    decode_matmul_seconds,
    matmul_ceiling_gflops,
    matmul_parameter_count,
    matmul_weights,
    packed_matmul_ceiling_gflops,
    print_table,
    resolve_model_name,
    weight_read_seconds,
)
from peft import LoraConfig, get_peft_model

from sparring import EngineConfig, ServiceClient, types
from sparring.engine.adapters import DEFAULT_LORA_ALPHA, linear_layer_groups
from sparring.models import load_base_model

LORA_RANK = 16
# Long enough that every concurrent `sample` call joins the first batch.
BATCH_WINDOW_S = 0.02


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(p) for p in prompts)
    tokens_B_P = torch.full((len(prompts), length), pad_token_id, dtype=torch.long)
    attention_mask_B_P = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens_B_P[row, length - len(prompt) :] = torch.tensor(prompt)
        attention_mask_B_P[row, length - len(prompt) :] = 1
    return tokens_B_P, attention_mask_B_P


def time_hf_generate(model, pad_token_id: int, prompts: list[list[int]], new_tokens: int) -> float:
    tokens_B_P, attention_mask_B_P = left_pad(prompts, pad_token_id)
    start = time.perf_counter()
    with torch.inference_mode():
        out_B_T = model.generate(
            input_ids=tokens_B_P,
            attention_mask=attention_mask_B_P,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=pad_token_id,
        )
    elapsed = time.perf_counter() - start
    assert out_B_T.shape[1] == tokens_B_P.shape[1] + new_tokens
    return elapsed


def time_sparring(sampling_client, prompts: list[list[int]], new_tokens: int) -> float:
    params = types.SamplingParams(max_tokens=new_tokens, temperature=1.0, stop=[])
    start = time.perf_counter()
    futures = [
        sampling_client.sample(types.ModelInput.from_ints(p), num_samples=1, sampling_params=params) for p in prompts
    ]
    responses = [future.result() for future in futures]
    elapsed = time.perf_counter() - start
    assert all(len(r.sequences[0].tokens) == new_tokens for r in responses)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=2, help="timings per cell; the best is kept")
    parser.add_argument("--quick", action="store_true", help="tiny random model, batches 1,2, 8 tokens: a smoke test")
    args = parser.parse_args()
    batches = [1, 2] if args.quick else [int(b) for b in args.batches.split(",")]
    new_tokens = 8 if args.quick else args.new_tokens
    model_name = resolve_model_name(args.model, args.quick)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    ceiling = matmul_ceiling_gflops(512 if args.quick else 2048)
    packed_ceiling = packed_matmul_ceiling_gflops(512 if args.quick else 2048) or float("nan")

    plain = load_base_model(model_name)
    with_lora = load_base_model(model_name)
    groups = linear_layer_groups(with_lora.model)
    lora_config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=DEFAULT_LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=sorted(groups["attn"] | groups["mlp"]),
    )
    hf_lora_model = get_peft_model(with_lora.model, lora_config).eval()

    service = ServiceClient(
        base_dir=tempfile.mkdtemp(prefix="sparring-bench-"), engine_config=EngineConfig(batch_window_s=BATCH_WINDOW_S)
    )
    training_client = service.create_lora_training_client(model_name, rank=LORA_RANK, seed=0)
    sampling_client = training_client.save_weights_and_get_sampling_client(kind="inflight")

    engine = training_client.engine

    def sparring_with(cpu_kernels: bool):
        def run(prompts: list[list[int]]) -> float:
            engine.config.sampler_cpu_kernels = cpu_kernels
            try:
                return time_sparring(sampling_client, prompts, new_tokens)
            finally:
                engine.config.sampler_cpu_kernels = True

        return run

    pad_token_id = plain.tokenizer.pad_token_id
    paths = {
        "hf generate": lambda prompts: time_hf_generate(plain.model, pad_token_id, prompts, new_tokens),
        "hf generate + lora": lambda prompts: time_hf_generate(hf_lora_model, pad_token_id, prompts, new_tokens),
        "sparring + lora": sparring_with(cpu_kernels=True),
        "sparring + lora, oneDNN": sparring_with(cpu_kernels=False),
    }
    warmup_prompts = chat_prompts(plain.renderer, 2)
    for run in paths.values():
        run(warmup_prompts)

    parameters = matmul_parameter_count(plain.model)
    best_s = {}
    for batch in batches:
        prompts = chat_prompts(plain.renderer, batch)
        for _ in range(args.repeats):  # paths alternate, so load from other processes hits them alike
            for name, run in paths.items():
                best_s[name, batch] = min(best_s.get((name, batch), float("inf")), run(prompts))
    tokens_per_s = {key: key[1] * new_tokens / seconds for key, seconds in best_s.items()}

    print(
        f"\nsampling {model_name}: {new_tokens} new tokens per row, temperature 1, LoRA r={LORA_RANK}, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"fp32 matmul ceiling: {ceiling:.0f} GFLOP/s (torch.matmul), {packed_ceiling:.0f} GFLOP/s "
          "(oneDNN-packed weight); "
          f"model: {parameters / 1e6:.1f} M parameters, {2 * parameters / 1e9:.3f} GFLOP per token")  # fmt: skip
    print(
        f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other processes "
        "share the cores)\n"
    )
    rows = []
    for batch in batches:
        for name in paths:
            rate = tokens_per_s[name, batch]
            gflops = 2 * parameters * rate / 1e9
            versus_hf = rate / tokens_per_s["hf generate", batch]
            versus_hf_lora = rate / tokens_per_s["hf generate + lora", batch]
            rows.append(
                [batch, name, rate, versus_hf, versus_hf_lora, gflops, gflops / ceiling, gflops / packed_ceiling]
            )
    print_table(
        ["batch", "path", "tokens/s", "vs hf", "vs hf+lora", "GFLOP/s", "of ceiling", "of oneDNN ceiling"], rows
    )

    # What a decode step cannot go below: reading every weight once, and the weight matmuls as the sampler runs them.
    weight_bytes = sum(w.numel() * w.element_size() for w in matmul_weights(plain.model))
    read_s = weight_read_seconds(plain.model)
    print(f"\nfloors of a decode step: every weight read once ({weight_bytes / 1e6:.0f} MB) {read_s * 1e3:.1f} "
          f"ms ({weight_bytes / read_s / 1e9:.1f} GB/s); "
          "the step's weight matmuls alone, as the sampler runs them:")  # fmt: skip
    # A kernel that overlaps streaming the weights with multiplying them takes the longer of the two; one that does
    # them in turn takes their sum. Where the measured matmuls sit between the two says which this host's kernels do.
    rows = []
    for batch in batches:
        matmul_s = decode_matmul_seconds(plain.model, batch)
        onednn_s = decode_matmul_seconds(plain.model, batch, cpu_kernels=False)
        gflops = 2 * parameters * batch / matmul_s / 1e9
        at_ceiling_s = 2 * parameters * batch / (ceiling * 1e9)
        rows.append([
            batch, matmul_s * 1e3, onednn_s * 1e3, batch / matmul_s, gflops / ceiling,
            tokens_per_s["sparring + lora", batch] * matmul_s / batch,
            max(read_s, at_ceiling_s) * 1e3, (read_s + at_ceiling_s) * 1e3,
        ])  # fmt: skip
    print_table(
        ["batch", "matmuls ms/step", "through oneDNN ms/step", "tokens/s if only they ran", "of ceiling",
         "sparring's step spent in them",
         "overlapped: max(read, at ceiling) ms", "in turn: read + at ceiling ms"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
