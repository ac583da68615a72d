"""Asynchronous off-policy training: seconds per step with rollouts running ahead (`max_staleness` 1) and without (0).

Whole `tune()` runs of guess-the-number alternate in one process (on-policy,
async, on-policy, async, ...; the model is loaded once and shared), on the
same tasks and seed, so load from other processes hits both alike. Each run
is `--steps` steps; its seconds per step are the median `time/step` after
the first step (which has nothing to overlap with): a step's rollout plus
training on-policy, the time from one step's end to the next in the pipeline.
It prints the median seconds per step of each mode, the median rollout and
train seconds of a step, how long the async trainer waited for its next
rollout, the ratio, and the load average before and after.

On one local engine the model runs on one worker, so sampling and training
take turns on it: the pipeline can only hide the time the worker would
otherwise sit idle (workflow code, batching windows, advantage and datum
assembly, logging) -- and on 2 cores the episodes' Python and the model's
threads compete for the same cores anyway.

    .venv/bin/python benchmarks/async_training.py [--steps 4] [--rounds 2] [--group 4] [--batch 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from common import print_table, resolve_model_name

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig
from sparring.envs.guess_number import guess_number, make_tasks
from sparring.trainer import TuneConfig, run_training


def job(args, model_name: str, max_staleness: int, run_dir: Path) -> TuneConfig:
    model = TunerModelConfig(model_path=model_name, max_tokens=args.max_tokens, lora_rank=16)
    algorithm = AlgorithmConfig(
        group_size=args.group,
        batch_size=args.batch,
        learning_rate=5e-4,
        drop_zero_variance_groups=False,
        max_staleness=max_staleness,
        seed=3,
    )
    tasks = make_tasks("train", args.batch * args.steps, seed=7)
    dataset = DatasetConfig(
        tasks=tasks,
        total_steps=args.steps,
        shuffle=False,
        workflow_args={"low": 1, "high": 16, "max_turns": args.turns},
    )
    return TuneConfig(
        model=model,
        algorithm=algorithm,
        train_dataset=dataset,
        run_dir=str(run_dir),
        logging=LoggingConfig(console=False, tensorboard=False, save_rollouts=False),
    )


def timed_run(config: TuneConfig) -> dict[str, float]:
    """One run's median seconds per step after its first, and its median rollout / train / wait seconds.

    `time/step` is a step's rollout and training on-policy, and the time between two steps' ends in the pipeline.
    """
    history = run_training(config, workflow=guess_number).history[1:]
    return {
        key: statistics.median(m.get(name, m["time/rollout"]) for m in history)
        for key, name in (
            ("step_s", "time/step"),
            ("rollout_s", "time/rollout"),
            ("train_s", "time/train"),
            ("wait_s", "time/wait_rollout"),
        )
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument(
        "--steps", type=int, default=None, help="steps per run, the first not timed (default 4; 3 with --quick)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="runs of each mode, alternating (default 2; 1 with --quick)"
    )
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--turns", type=int, default=3, help="guesses per episode")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the tiny random model (a smoke test unless --steps and --rounds are raised)",
    )
    args = parser.parse_args()
    args.steps = args.steps or (3 if args.quick else 4)
    args.rounds = args.rounds or (1 if args.quick else 2)
    model_name = resolve_model_name(args.model, args.quick)
    directory = Path(tempfile.mkdtemp(prefix="sparring-async-bench-"))
    print(f"load average before: {os.getloadavg()}", flush=True)
    runs: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    for round_index in range(args.rounds):
        for staleness in (0, 1):
            timing = timed_run(job(args, model_name, staleness, directory / f"run-{round_index}-{staleness}"))
            runs[staleness].append(timing)
            print(
                f"round {round_index} max_staleness {staleness}: {timing['step_s']:.2f} s/step (rollout "
                f"{timing['rollout_s']:.2f}, train {timing['train_s']:.2f}, waited {timing['wait_s']:.2f})",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()}")
    median = {
        staleness: {key: statistics.median(run[key] for run in timings) for key in timings[0]}
        for staleness, timings in runs.items()
    }
    print(
        f"\nguess the number on {args.model if not args.quick else 'the tiny model'}: group {args.group} x "
        f"batch {args.batch}, {args.turns} turns, max_tokens {args.max_tokens}; {args.steps} steps a run, "
        f"median of {args.rounds} runs"
    )
    print_table(
        ["max_staleness", "s/step", "rollout s", "train s", "waited for rollout s"],
        [[s, m["step_s"], m["rollout_s"], m["train_s"], m["wait_s"]] for s, m in median.items()],
    )
    pairs = [off["step_s"] / on["step_s"] for on, off in zip(runs[1], runs[0], strict=True)]
    print(
        f"on-policy / async s/step: {statistics.median(pairs):.2f}x (per round: {', '.join(f'{p:.2f}' for p in pairs)})"
    )


if __name__ == "__main__":
    main()
