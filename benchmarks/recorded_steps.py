"""A run's own training batches through the learner: prefix trees against every datum whole.

A multi-turn run trains merged timelines that begin alike at many depths (the
same rules, then the same first guess, the same reply...). This replays the
batches a finished run recorded (`<run_dir>/rollouts/step_*.jsonl`: tokens,
sampled mask, calls and advantages of every trained timeline, assembled into
datums as the trainer does; `make demo` writes `runs/guess_number`) through one forward+backward each, ppo, on the run's
base model with a fresh LoRA of rank 16, with `EngineConfig.learner_prefix_tree`
on (the default) and off, alternating per step, best of `--repeats` after a
warm-up. Reported per step: datum tokens, the tokens each layout runs (trie
nodes; padded tokens), seconds, and the speed-up; then the totals.

    .venv/bin/python benchmarks/recorded_steps.py [--run-dir runs/guess_number] [--steps 1 8 15] [--repeats 2] \\
        [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import print_table

from sparring import ServiceClient, types
from sparring.algorithms import build_datums
from sparring.engine.batch_plan import micro_batches
from sparring.engine.prefix_tree import plan_tree_batches
from sparring.logging import read_rollouts
from sparring.rollout import Episode, Timeline


def recorded_datums(path: Path) -> list[types.Datum]:
    """The step's trained timelines as the trainer assembled them (`build_datums`), from the recorded dump."""
    records = [record for record in read_rollouts(path) if record["advantage"] is not None]
    episodes = [
        Episode(
            task={},
            group=0,
            rewards={},
            timelines=[
                Timeline(
                    agent=r["agent"],
                    model=r["model"],
                    tokens=r["tokens"],
                    loss_mask=r["loss_mask"],
                    logprobs=r["logprobs"],
                    num_calls=r["num_calls"],
                    call_index=r["call_index"],
                )
            ],
        )
        for r in records
    ]
    advantages = {(index, record["agent"]): record["advantage"] for index, record in enumerate(records)}
    return [datum for data in build_datums(episodes, advantages).values() for datum in data]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/guess_number")
    parser.add_argument("--steps", type=int, nargs="*", help="recorded steps (file numbers); default all")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the run's base model")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    files = sorted((run_dir / "rollouts").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise SystemExit(f"{run_dir}/rollouts has no step_*.jsonl: run `make demo` (or any training run) first")
    if args.steps:
        files = [f for f in files if int(f.stem.split("_")[1]) in args.steps]
    training_client = ServiceClient().create_lora_training_client(args.model, rank=16, seed=0)
    engine = training_client.engine
    rows, totals = [], {"tokens": 0, "nodes": 0, "padded": 0, True: 0.0, False: 0.0}
    for path in files:
        data = recorded_datums(path)
        tokens = [torch.tensor(d.model_input.to_ints()) for d in data]
        nodes = sum(len(batch.tokens_N) for batch in plan_tree_batches(tokens, engine.config.token_budget()))
        padded = sum(
            max(len(tokens[i]) for i in batch.indices) * len(batch.indices)
            for batch in micro_batches([len(t) for t in tokens], engine.config.token_budget())
        )
        best = {True: float("inf"), False: float("inf")}
        for repeat in range(args.repeats + 1):  # the first round warms up
            for tree in (True, False) if repeat % 2 else (False, True):
                engine.config.learner_prefix_tree = tree
                start = time.perf_counter()
                training_client.forward_backward(data, "ppo").result()
                if repeat:
                    best[tree] = min(best[tree], time.perf_counter() - start)
        datum_tokens = sum(len(t) for t in tokens)
        rows.append(
            [path.stem, len(data), datum_tokens, nodes, padded, best[True], best[False], best[False] / best[True]]
        )
        for key, value in (
            ("tokens", datum_tokens),
            ("nodes", nodes),
            ("padded", padded),
            (True, best[True]),
            (False, best[False]),
        ):
            totals[key] += value
        print(f"{path.stem}: {best[True]:.2f} s as trees, {best[False]:.2f} s whole", flush=True)
    engine.config.learner_prefix_tree = True
    rows.append(
        [
            "all",
            "",
            totals["tokens"],
            totals["nodes"],
            totals["padded"],
            totals[True],
            totals[False],
            totals[False] / totals[True],
        ]
    )
    print(f"\nRecorded training batches of {run_dir}, forward+backward (ppo), best of {args.repeats}\n")
    print_table(
        ["batch", "datums", "datum tokens", "trie nodes", "padded tokens", "trees s", "whole s", "speed-up"], rows
    )


if __name__ == "__main__":
    main()
