"""The learning suite: six small games nobody tuned, trained with `AlgorithmConfig()`'s defaults, one table.

Every game is a file of this folder (a workflow, its tasks, scripted baselines, the optimum where one is known)
written against the public API only. For each game and seed this trains `--steps` steps with the defaults (the
seed aside), then plays the same `--eval-episodes` held-out tasks with the untrained model, the trained one and
every scripted baseline, and reports the game's metric with a 95 % interval. A game *learns* at a seed when the
trained interval lies entirely above the untrained one.

    python benchmarks/learning_suite/run.py                       # all six games, seeds 0 and 1
    python benchmarks/learning_suite/run.py --games convention --seeds 0 --steps 10
    python benchmarks/learning_suite/run.py --set exploration=0   # one default changed, for an A/B
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import yaml

from sparring import AlgorithmConfig, DatasetConfig, Job, LoggingConfig, TuneConfig, TunerModelConfig

HERE = Path(__file__).resolve().parent
GAMES = ["contextual_choice", "convention", "frozen_opponent", "kuhn_poker", "bargaining", "team_relay"]
EVAL_SEED = 10_000
"""Held-out tasks are drawn from this seed whatever the training seed, so every run is scored on the same tasks."""


def run_game(name: str, seed: int, steps: int, eval_episodes: int, out: Path, changes: dict, model_path: str) -> dict:
    """Train one game at one seed and evaluate it; returns its row of the table."""
    game = importlib.import_module(name)
    path = f"{HERE / name}.py"
    auxiliary = {key: {**value, "model_path": model_path} for key, value in getattr(game, "AUXILIARY", {}).items()}
    config = TuneConfig(
        workflow=f"{path}:workflow",
        model=TunerModelConfig(model_path=model_path),
        auxiliary_models={key: TunerModelConfig(**value) for key, value in auxiliary.items()},
        algorithm=AlgorithmConfig(**{**changes, "seed": seed}),
        train_dataset=DatasetConfig(tasks=game.tasks(4096, seed), total_steps=steps),
        eval_dataset=DatasetConfig(tasks=game.tasks(eval_episodes, EVAL_SEED), shuffle=False),
        baselines={label: f"{path}:{policy.__name__}" for label, policy in game.BASELINES.items()},
        run_dir=str(out / f"{name}-seed{seed}"),
        logging=LoggingConfig(tensorboard=False, save_rollouts=False),
    )
    started = time.perf_counter()
    result = Job.from_config(config).tune(overwrite=True)
    wall = time.perf_counter() - started
    columns = {column.label: column.estimates[game.METRIC] for column in result.comparison.columns}
    cell = {label: [found.mean, found.low, found.high] for label, found in columns.items()}
    learned = result.comparison.markers()["untrained"].get(game.METRIC) == "above"
    train_time = sum(record.get("time/step", 0.0) for record in result.history)
    trained_steps = sum(record.get("tokens/trained", 0.0) > 0 for record in result.history)
    return {
        "game": name,
        "seed": seed,
        "metric": game.METRIC,
        "optimum": game.OPTIMUM,
        "columns": cell,
        "learned": learned,
        "train_s": train_time,
        "wall_s": wall,
        "steps": len(result.history),
        "steps_that_trained": trained_steps,
    }


def interval(values: list[float]) -> str:
    mean, low, high = values
    return f"{mean:.3f} [{low:.2f}, {high:.2f}]"


def table(rows: list[dict]) -> str:
    lines = [
        "| game | seed | metric | untrained | trained | baselines | optimum | learns | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        baselines = "; ".join(
            f"{label} {interval(v)}" for label, v in row["columns"].items() if label not in ("untrained", "trained")
        )
        optimum = "-" if row["optimum"] is None else f"{row['optimum']:.3f}"
        untrained, trained = interval(row["columns"]["untrained"]), interval(row["columns"]["trained"])
        learns = "yes" if row["learned"] else "no"
        lines.append(
            f"| {row['game']} | {row['seed']} | {row['metric']} | {untrained} | {trained} | {baselines} | {optimum} "
            f"| {learns} | {row['train_s']:.0f} |"
        )
    learned = sum(row["learned"] for row in rows)
    lines.append(f"\n{learned} of {len(rows)} (game, seed) runs learn: trained's interval entirely above untrained's.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", nargs="+", default=GAMES, choices=GAMES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=30, help="training steps of every game (one budget for all)")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("runs/learning_suite"))
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the base model of every game (and opponent)")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="change an algorithm default (YAML value)"
    )
    args = parser.parse_args()
    changes = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.set)}
    sys.path.insert(0, str(HERE))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.games:
        for seed in args.seeds:
            rows.append(run_game(name, seed, args.steps, args.eval_episodes, args.out, changes, args.model))
            print(json.dumps(rows[-1]), flush=True)
            (args.out / "results.json").write_text(
                json.dumps({"changes": changes, "steps": args.steps, "rows": rows}, indent=1)
            )
    print(table(rows))


if __name__ == "__main__":
    main()
