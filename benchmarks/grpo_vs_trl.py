"""A whole GRPO step, sparring's `tune()` against TRL's `GRPOTrainer`, on equal work.

Both train SmolLM2-135M-Instruct (the same local weights: the directory
sparring converted its embedded GGUF into) with a LoRA of rank 16, alpha 32,
no dropout, on the same seven projections (q, k, v, o, gate, up, down), in
float32 on the CPU, on the toy prompts "What is a op b?". Per step: the
same number of prompts x completions (group size 8 by default), temperature
1, one optimizer step on the batch just sampled.

Equal work (the default, `--work equal`): both draw the same prompts in the
same order (no shuffle: prompt k of the step is task k of the list in both),
every completion is exactly `--max-tokens` long in both (sparring samples
with `stop=[]`, TRL with `min_new_tokens` = `max_new_tokens`, so the same
number of tokens is sampled and trained), and the reward is the share of
distinct words in the reply, which differs between the completions of a
group, so every group has reward variance and both run a real backward on
every completion (the zero-variance share is reported to show it).
`--work free` is the earlier comparison: completions end at the end-of-turn
token (each framework samples its own lengths) and the reward is
correctness (1 when the last number is the answer), nearly always 0.

Settings that make the rest of the work the same (checked against TRL 1.16's
code):
- TRL: `bf16=False`, `gradient_checkpointing=False` (its default is True),
  `beta=0` (its default: no reference model), `num_iterations=1` and
  `steps_per_generation` = `gradient_accumulation_steps` = 1, so it computes
  no "old" logprobs with an extra forward (the detached current ones stand in);
  one forward+backward over all completions of the step
  (`per_device_train_batch_size` = completions per step).
- sparring: `kl_coef=0` (no base-model scoring pass) and
  `drop_zero_variance_groups=False`, so groups whose completions all got the
  same reward are trained on as TRL does (their advantage is 0; sparring's
  learner then runs no LM-head gradient for them, TRL's still does).
- The losses differ in normalisation only (TRL `dapo`, sparring `ppo`
  summed); the clipping (0.8 / 1.2) is the same and costs nothing.

Each framework runs in a subprocess of its own per measurement (its peak RSS
is that process's, from `wait4`), sparring and TRL alternating (A B, then B
A), one warm-up step then `--steps` timed steps each. Reported per step
(medians): seconds, the split into sampling / scoring / training, completion
tokens per second of sampling and of training, and the ratio TRL / sparring.

Sampling here is everything before the loss: generation, decoding and
tokenising, advantages (for sparring the episodes, for TRL
`_generate_and_score_completions`), minus scoring, the reward function's own
time; training is the rest of the step (forward+backward, optimizer step).

Run with the `bench` extra installed (`pip install -e '.[bench]'`, what
`make bench` does):

    .venv/bin/python benchmarks/grpo_vs_trl.py [--sizes 8 32] [--steps 3] [--rounds 1] [--work equal|free]
    .venv/bin/python benchmarks/grpo_vs_trl.py --steps 2 --sizes 8      # a quick look

`--floors` then measures, in the same run, what sparring's step cannot go below
on this host (`floors`): whether 3x TRL is within reach of any fp32
implementation (each decode step reads every weight and multiplies by it, at
best as fast as the host reads memory and runs a large matmul; training at the
matmul ceiling), of sparring's sampler kernels (the decode step's weight matmuls as
its sampler runs them) and of all of sparring's matmuls (those, plus every matmul
of one forward+backward of the step's batch as its learner runs it, each replayed alone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "smollm2-135m-instruct"
LORA_RANK = 16
LORA_ALPHA = 32
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = 1e-5
FRAMEWORKS = ("sparring", "trl")
WORKS = ("equal", "free")


def arithmetic_tasks(count: int, seed: int = 0) -> list[dict]:
    """`count` questions "What is a op b?" with their integer answers."""
    rng = random.Random(seed)
    operations = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    tasks = []
    for _ in range(count):
        a, b, op = rng.randint(2, 50), rng.randint(2, 50), rng.choice(sorted(operations))
        tasks.append({"question": f"What is {a} {op} {b}?", "answer": operations[op](a, b)})
    return tasks


def correctness(reply: str, answer: int) -> float:
    """1 when the last integer in the reply is the answer, else 0."""
    numbers = re.findall(r"-?\d+", reply.replace(",", ""))
    return 1.0 if numbers and int(numbers[-1]) == answer else 0.0


def distinct_word_share(reply: str) -> float:
    """The share of the reply's words that are distinct: a reward that differs between sampled completions."""
    words = reply.lower().split()
    return len(set(words)) / len(words) if words else 0.0


def reward_of(work: str, reply: str, answer: int) -> float:
    return distinct_word_share(reply) if work == "equal" else correctness(reply, answer)


def zero_variance_share(rewards: list[float], group_size: int) -> float:
    """The share of groups (consecutive runs of `group_size` rewards) whose rewards are all equal."""
    groups = [rewards[start : start + group_size] for start in range(0, len(rewards), group_size)]
    return sum(len(set(group)) == 1 for group in groups) / len(groups)


def local_model_dir() -> Path:
    """The Hugging Face directory sparring loads SmolLM2 from (converted once from the embedded GGUF)."""
    from sparring.models import load_base_model
    from sparring.models.catalogue import resolve_model
    from sparring.models.loading import converted_cache_dir

    directory = converted_cache_dir(resolve_model(MODEL))
    if not (directory / "config.json").exists():
        load_base_model(MODEL)  # converts and caches
    return directory


# Workers: one framework, one process ---------------------------------------------------------------------------------


def run_sparring(completions: int, group_size: int, steps: int, max_tokens: int, work: str) -> list[dict]:
    from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, WorkflowOutput, tune
    from sparring.logging import read_metrics

    async def arithmetic(task, model, auxiliary_models):
        forced_length = {"stop": []} if work == "equal" else {}  # no stop token: every reply is max_tokens long
        reply = await model([{"role": "user", "content": task["question"]}], **forced_length)
        started = time.perf_counter()
        reward = reward_of(work, reply.content or "", task["answer"])
        return WorkflowOutput(reward=reward, metrics={"score_seconds": time.perf_counter() - started})

    run_dir = Path(tempfile.mkdtemp(prefix="sparring-vs-trl-")) / "run"
    tune(
        workflow_func=arithmetic,
        train_dataset=DatasetConfig(tasks=arithmetic_tasks(256), total_steps=steps, shuffle=work == "free"),
        model=TunerModelConfig(model_path=MODEL, max_tokens=max_tokens, lora_rank=LORA_RANK, temperature=1.0),
        algorithm=AlgorithmConfig(
            group_size=group_size,
            batch_size=completions // group_size,
            learning_rate=LEARNING_RATE,
            loss_fn="ppo",
            kl_coef=0.0,
            drop_zero_variance_groups=False,
            episode_timeout_s=3600.0,
            save_interval_steps=0,
            eval_interval_steps=0,
        ),
        run_dir=run_dir,
        logging=LoggingConfig(console=False, tensorboard=False, save_rollouts=False),
    )
    records = []
    for metrics in read_metrics(run_dir):
        scoring = metrics["workflow/score_seconds"] * metrics["episodes"]
        records.append(
            {
                "step": metrics["time/step"],
                "sampling": metrics["time/rollout"] - scoring,
                "scoring": scoring,
                "train": metrics["time/step"] - metrics["time/rollout"],
                "completion_tokens": metrics["tokens/sampled"],
                "tokens": metrics["tokens/total"] + metrics["episodes"],
                "reward": metrics["reward/mean"],
                "zero_variance": metrics["advantage/zero_variance_fraction"],
            }
        )
    return records


def run_trl(completions: int, group_size: int, steps: int, max_tokens: int, work: str) -> list[dict]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    timings: dict[str, float] = {}
    records: list[dict] = []

    def add(name: str, seconds: float) -> None:
        timings[name] = timings.get(name, 0.0) + seconds

    class TimedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with its generation, scoring and token counts recorded per step (behaviour unchanged)."""

        def _generate_and_score_completions(self, inputs):
            started = time.perf_counter()
            output = super()._generate_and_score_completions(inputs)
            add("prepare", time.perf_counter() - started)
            return output

        def _generate(self, prompts):
            output = super()._generate(prompts)
            prompt_ids, completion_ids = output[0], output[1]
            add("completion_tokens", sum(len(ids) for ids in completion_ids))
            add("tokens", sum(len(ids) for ids in prompt_ids) + sum(len(ids) for ids in completion_ids))
            return output

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            started = time.perf_counter()
            output = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            add("scoring", time.perf_counter() - started)
            add("reward_sum", float(output.sum()))
            timings["zero_variance"] = zero_variance_share(output.sum(dim=1).tolist(), group_size)
            return output

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timings.clear()
            timings["started"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            step = time.perf_counter() - timings["started"]
            records.append(
                {
                    "step": step,
                    "sampling": timings["prepare"] - timings["scoring"],
                    "scoring": timings["scoring"],
                    "train": step - timings["prepare"],
                    "completion_tokens": timings["completion_tokens"],
                    "tokens": timings["tokens"],
                    "reward": timings["reward_sum"] / completions,
                    "zero_variance": timings["zero_variance"],
                }
            )

    def reward(completions, answer, **kwargs):
        return [
            reward_of(work, completion[-1]["content"], int(expected))
            for completion, expected in zip(completions, answer, strict=True)
        ]

    directory = local_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t["question"]}], "answer": t["answer"]} for t in arithmetic_tasks(256)]
    )
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-vs-sparring-"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        beta=0.0,
        num_iterations=1,
        num_generations=group_size,
        per_device_train_batch_size=completions,
        gradient_accumulation_steps=1,
        max_completion_length=max_tokens,
        temperature=1.0,
        learning_rate=LEARNING_RATE,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        shuffle_dataset=work == "free",
        generation_kwargs={"min_new_tokens": max_tokens}
        if work == "equal"
        else None,  # end-of-turn suppressed: every reply max_tokens long
    )
    peft_config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=LORA_MODULES,
        bias="none",
        task_type="CAUSAL_LM",
    )
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[StepTimer()],
    )
    trainer.train()
    return records


# The parent: interleave, measure, report ------------------------------------------------------------------------------


def measure(framework: str, completions: int, args) -> dict:
    """One worker process: its per-step records (warm-up steps dropped) and its peak RSS in GB."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        result_file = handle.name
    command = [
        sys.executable, __file__, "--worker", framework, "--completions", str(completions),
        "--group-size", str(args.group_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--max-tokens", str(args.max_tokens), "--work", args.work, "--result-file", result_file,
    ]  # fmt: skip
    output = None if args.verbose else subprocess.DEVNULL
    process = subprocess.Popen(command, stdout=output, stderr=output)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(
            f"{framework} worker at {completions} completions failed (exit "
            f"{os.waitstatus_to_exitcode(status)}); rerun with --verbose"
        )
    records = json.loads(Path(result_file).read_text())
    os.unlink(result_file)
    peak_gb = usage.ru_maxrss * 1024 / 1e9  # Linux reports kilobytes
    return {"records": records[args.warmup :], "peak_rss_gb": peak_gb}


def summarize(runs: list[dict]) -> dict:
    records = [record for run in runs for record in run["records"]]
    median = {
        key: statistics.median(r[key] for r in records)
        for key in ("step", "sampling", "scoring", "train", "completion_tokens", "tokens", "reward", "zero_variance")
    }
    median["sampled_tokens_per_s"] = statistics.median(r["completion_tokens"] / r["sampling"] for r in records)
    median["trained_tokens_per_s"] = statistics.median(r["completion_tokens"] / r["train"] for r in records)
    median["peak_rss_gb"] = max(run["peak_rss_gb"] for run in runs)
    median["steps"] = len(records)
    return median


def report(size: int, summaries: dict[str, dict]) -> None:
    group_size = summaries["sparring"]["group_size"]
    print(f"\n{size} completions per step: {size // group_size} prompt(s) x {group_size}")
    header = (
        f"{'':>9} {'s/step':>7} {'sampling':>9} {'scoring':>8} {'train':>7} {'tokens':>7} {'compl.':>7} "
        f"{'compl. tok/s sampled':>21} "
        f"{'compl. tok/s trained':>21} {'peak RSS GB':>12} {'reward':>7} {'zero-var':>9} {'steps':>6}"
    )
    print(header)
    print("-" * len(header))
    for framework in FRAMEWORKS:
        s = summaries[framework]
        print(
            f"{framework:>9} {s['step']:7.1f} {s['sampling']:9.1f} {s['scoring']:8.3f} {s['train']:7.1f} "
            f"{s['tokens']:7.0f} "
            f"{s['completion_tokens']:7.0f} {s['sampled_tokens_per_s']:21.0f} "
            f"{s['trained_tokens_per_s']:21.0f} {s['peak_rss_gb']:12.1f} "
            f"{s['reward']:7.2f} {s['zero_variance']:9.2f} {s['steps']:6d}"
        )
    trl, ours = summaries["trl"], summaries["sparring"]
    print(
        f"TRL / sparring: step {trl['step'] / ours['step']:.2f}x, sampling "
        f"{trl['sampling'] / ours['sampling']:.2f}x, train {trl['train'] / ours['train']:.2f}x"
    )


def floors(summaries_by_size: dict[int, dict[str, dict]], args) -> None:
    """What sparring's step cannot go below on this host at each size, beside a third of TRL's step, three ways:
    its decode steps (each reads every weight once and multiplies by it: the longer of the two at their best rates)
    plus its training half's FLOPs (forward and backward through the frozen weights, 4 x weights x tokens, the
    group's prompt once) at the matmul ceiling; the decode steps' weight matmuls as sparring's sampler runs them
    plus the same training FLOPs at the ceiling; and the step's matmuls as sparring runs them, sampler and learner
    (every matmul of one forward+backward of the step's batch, replayed alone: `learner_matmul_seconds`)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from common import (
        decode_matmul_seconds,
        learner_matmul_seconds,
        matmul_ceiling_gflops,
        matmul_weights,
        weight_read_seconds,
    )

    from sparring.models import load_base_model

    model = load_base_model(MODEL).model
    tied_or_head = {model.get_input_embeddings().weight.data_ptr(), model.get_output_embeddings().weight.data_ptr()}
    head = model.get_output_embeddings().weight.numel()
    backbone = sum(w.numel() for w in matmul_weights(model) if w.data_ptr() not in tied_or_head)
    ceiling, read_s = matmul_ceiling_gflops(), weight_read_seconds(model)
    decode_steps = args.max_tokens - 1  # the first token of a completion comes from the prefill
    print(
        f"\nfloors on this host: every weight read once {read_s * 1e3:.1f} ms; fp32 matmul ceiling "
        f"{ceiling:.0f} GFLOP/s"
    )
    for size, summaries in summaries_by_size.items():
        ours, trl = summaries["sparring"], summaries["trl"]
        completion = ours["completion_tokens"]
        prompt_once = (ours["tokens"] - completion) / args.group_size
        train_gflop = 4 * (backbone * (prompt_once + completion) + head * completion) / 1e9
        train_s, matmul_s = train_gflop / ceiling, decode_matmul_seconds(model, size)
        questions = [
            task["question"] for task in arithmetic_tasks(256)[: size // args.group_size]
        ]  # the first step's prompts
        learner_s, learner_gflop = learner_matmul_seconds(MODEL, questions, args.group_size, args.max_tokens)
        target = trl["step"] / 3
        # A decode step reads every weight and multiplies by it: no less than either at its best rate.
        bound_s = max(read_s, 2 * (backbone + head) * size / 1e9 / ceiling)
        lines = (
            (
                "weights read or multiplied at the ceiling",
                f"{decode_steps} x {bound_s * 1e3:.1f} ms + training {train_gflop:.4g} GFLOP at the "
                f"ceiling {train_s:.2f} s",
                decode_steps * bound_s + train_s,
            ),
            (
                "weight matmuls as sparring runs them",
                f"{decode_steps} x {matmul_s * 1e3:.1f} ms + training {train_gflop:.4g} GFLOP at the "
                f"ceiling {train_s:.2f} s",
                decode_steps * matmul_s + train_s,
            ),
            (
                "all matmuls as sparring runs them",
                f"{decode_steps} x {matmul_s * 1e3:.1f} ms + the learner's matmuls alone {learner_s:.2f} s "
                f"({learner_gflop:.4g} GFLOP)",
                decode_steps * matmul_s + learner_s,
            ),
        )
        for name, parts, floor in lines:
            print(
                f"{size} completions, {name}: {parts} = {floor:.2f} s a step; 3x TRL ({trl['step']:.1f} s) "
                f"needs <= {target:.2f} s: {'within reach' if floor <= target else 'out of reach'}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32], help="completions per step")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first, per process")
    parser.add_argument("--rounds", type=int, default=1, help="processes per framework and size (A B, B A, ...)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--work",
        choices=WORKS,
        default="equal",
        help="equal: same prompts, forced lengths, a reward with variance in every group",
    )
    parser.add_argument(
        "--floors",
        action="store_true",
        help="then measure what a step cannot go below on this host, beside a third of TRL's",
    )
    parser.add_argument("--verbose", action="store_true", help="show the workers' output")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--completions", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = run_sparring if args.worker == "sparring" else run_trl
        records = run(args.completions, args.group_size, args.warmup + args.steps, args.max_tokens, args.work)
        Path(args.result_file).write_text(json.dumps(records))
        return
    for size in args.sizes:
        if size % args.group_size:
            raise SystemExit(f"--sizes: {size} completions is not a multiple of --group-size {args.group_size}")
    local_model_dir()  # convert once, before anything is timed
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    print(f"GRPO step ({args.work} work), {MODEL} + LoRA r{LORA_RANK}, fp32 CPU, {args.max_tokens} max new tokens, "
          f"group size {args.group_size}, {args.warmup} warm-up + {args.steps} timed steps per process, "
          f"{args.rounds} process(es) per framework and size")  # fmt: skip
    summaries_by_size: dict[int, dict[str, dict]] = {}
    for size in args.sizes:
        runs: dict[str, list[dict]] = {framework: [] for framework in FRAMEWORKS}
        for round_index in range(args.rounds):
            order = FRAMEWORKS if round_index % 2 == 0 else FRAMEWORKS[::-1]
            for framework in order:
                runs[framework].append(measure(framework, size, args))
        summaries = {
            framework: {**summarize(framework_runs), "group_size": args.group_size}
            for framework, framework_runs in runs.items()
        }
        report(size, summaries)
        summaries_by_size[size] = summaries
    if args.floors:
        floors(summaries_by_size, args)
    print(
        f"\n1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"{time.perf_counter() - started:.0f} s in all"
    )


if __name__ == "__main__":
    main()
