"""What the engine's prefix cache saves: a held-out evaluation with the cache on vs off, in the same run.

Each game's packaged config is evaluated as `sparring eval GAME --tasks N` does (`run_evaluation`: the model,
then the config's baselines, on the first N held-out tasks), alternating cache off and on (the budget the
game's config gives `model.prefix_cache_mib`, or `--cache-mib`, set for every model of the config) on one
engine (emptied before every run; the engine's seed stream restarted, so both see the same requests as far as
batching allows). Per run: prompt tokens, tokens actually prefilled (a prefix shared
inside one batch counts once, with the cache off too), wall time and the process's CPU time; the table prints
each setting's best times and median prefilled tokens, and their ratios (off / on).

Games: werewolf (7 players, 2 rounds: every player re-reads the rules and the day's talk every turn),
twenty_questions (a policy asks, a frozen answerer reads the growing conversation), guess_number (4 turns).
`conversations` is the same kind of load on the engine alone, with exactly the same work both ways: 7
conversations that share werewolf's rules, 5 turns each (a new message, then a seeded 16-token reply, which
the cache leaves unchanged), the 7 calls of a turn batched.

    .venv/bin/python benchmarks/prefix_cache.py [--games werewolf,twenty_questions,guess_number] [--tasks 4] \\
        [--repeats 1] [--quick]
    .venv/bin/python benchmarks/prefix_cache.py --games werewolf --set eval_dataset.workflow_args.full_history=true
    .venv/bin/python benchmarks/prefix_cache.py --games werewolf --tasks 20 --cache-mib 1024  # not the config's budget
    .venv/bin/python benchmarks/prefix_cache.py --games werewolf --train-steps 4 --repeats 2    # training steps instead
    python benchmarks/prefix_cache.py --device cuda --games werewolf --tasks 20    # on a GPU (bfloat16 weights)

With `--train-steps N` each run is `sparring train GAME` for N steps instead (no held-out evaluation, nothing saved
but the run folder, in a temporary directory): every model's `prefix_cache_mib` set to 0 or the 'on' budget, the
same seed, so both settings draw the same tasks and seeded samples. Wall time is the steps' own time (the
`time/step` metric), rollouts beside it (`time/rollout`), prefilled tokens the steps' `engine/` metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from common import print_table, resolve_model_name

from sparring import EngineConfig, types
from sparring.engine import get_engine
from sparring.engine.prefix_cache import PrefillCounts
from sparring.envs import load_config
from sparring.trainer.loop import run_evaluation, run_training

GAMES = ("werewolf", "twenty_questions", "guess_number", "conversations")
RULES = (
    "A game of werewolf with Player1 to Player7: 2 werewolves, 3 villagers, a seer and a witch. The good "
    "players win by "
    "voting out both werewolves; the werewolves win if they are as many as the good players within 2 rounds. "
    "Answer in one short sentence."
)
CACHE_MIB = 1024
"""The 'on' budget of the `conversations` load (the games take their config's `model.prefix_cache_mib`)."""


def shipped_cache_mib(game: str, overrides: list[str]) -> float:
    """The prefix cache budget `game`'s config gives its (first) trainable model: what `sparring eval GAME` runs
    with."""
    return next(iter(load_config(game, overrides).trainable_models().values())).prefix_cache_mib


def models_on(game: str, model: str, mib: float, device: str) -> list[str]:
    """Overrides that put every model of `game`'s config on `model` on `device` with a `mib` MiB prefix cache (the
    engine takes the budget a run's config gives it)."""
    fields = ["model", *(f"auxiliary_models.{name}" for name in load_config(game).auxiliary_models)]
    settings = {"model_path": model, "device": device, "prefix_cache_mib": mib}
    return [f"{field}.{key}={value}" for key, value in settings.items() for field in fields]


def evaluate_once(
    game: str, model: str, device: str, tasks: int, mib: float, seed: int, overrides: list[str]
) -> tuple[PrefillCounts, float, float]:
    """One `sparring eval`-equivalent run of `game` on `tasks` tasks with a `mib` MiB prefix cache (0: off): what it
    prefilled, its wall time and the process's CPU time (less sensitive to other jobs on a shared machine)."""
    config = load_config(game, [*models_on(game, model, mib, device), "logging.console=false", *overrides])
    engine = get_engine(model, EngineConfig(device=device, prefix_cache_mib=mib))
    engine.empty_prefix_cache().result()
    engine.reseed(seed)
    before = PrefillCounts() + engine.prefill_counts
    started, cpu_started = time.perf_counter(), time.process_time()
    asyncio.run(run_evaluation(config, limit=tasks))
    return engine.prefill_counts - before, time.perf_counter() - started, time.process_time() - cpu_started


def train_once(
    game: str, model: str, device: str, steps: int, mib: float, overrides: list[str]
) -> tuple[PrefillCounts, float, float]:
    """`sparring train game` for `steps` steps with every model's prefix cache at `mib` MiB (0: off): what its steps
    prefilled, their wall time (`time/step`) and their rollouts' (`time/rollout`)."""
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(
            game,
            [
                f"run_dir={run_dir}/run",
                "logging.console=false",
                "logging.tensorboard=false",
                "eval_dataset=null",
                "algorithm.save_interval_steps=0",
                "algorithm.allow_nothing_trained=true",
                f"train_dataset.total_steps={steps}",
                *models_on(game, model, mib, device),
                *overrides,
            ],
        )
        history = run_training(config).history

    def total(key: str) -> float:
        return sum(step[key] for step in history)

    cached = round(sum(step["engine/prefix_hit_rate"] * step["engine/prompt_tokens"] for step in history))
    counts = PrefillCounts(
        prompt_tokens=int(total("engine/prompt_tokens")),
        cached_tokens=cached,
        prefilled_tokens=int(total("engine/prefilled_tokens")),
    )
    return counts, total("time/step"), total("time/rollout")


def converse_once(model: str, device: str, turns: int, mib: float) -> tuple[PrefillCounts, float, float]:
    """The `conversations` load with a `mib` MiB prefix cache: what it prefilled, wall and CPU time."""
    engine = get_engine(model, EngineConfig(device=device))
    engine.set_prefix_cache(mib).result()
    renderer = engine.loaded.renderer
    before = PrefillCounts() + engine.prefill_counts
    started, cpu_started = time.perf_counter(), time.process_time()
    histories = [[{"role": "system", "content": f"{RULES} You are Player{player}."}] for player in range(1, 8)]
    for turn in range(turns):
        futures = []
        for player, history in enumerate(histories):
            said = (
                f"Day {turn}. Player{(player + turn) % 7 + 1} saw nothing last night; "
                f"Player{(player + 2 * turn) % 7 + 1} accuses Player{(player + 3) % 7 + 1}. What do you say?"
            )
            history.append({"role": "user", "content": said})
            params = types.SamplingParams(max_tokens=16, seed=player * 100 + turn, temperature=1.0)
            futures.append(engine.sample(None, renderer.render(history), 1, params))
        for history, future in zip(histories, futures, strict=True):
            history.append(renderer.parse_response(future.result().sequences[0].tokens, tool_calls=False))
    return engine.prefill_counts - before, time.perf_counter() - started, time.process_time() - cpu_started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default=",".join(GAMES))
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks (games) per evaluation")
    parser.add_argument("--repeats", type=int, default=1, help="off/on pairs per game")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument(
        "--device",
        default="cpu",
        help="every model's torch device ('cuda': bfloat16 weights, as `model.device: cuda` gives)",
    )
    parser.add_argument("--quick", action="store_true", help="the tiny random model: a smoke test, not a measurement")
    parser.add_argument(
        "--cache-mib",
        type=float,
        default=None,
        help="the prefix cache's budget in the 'on' runs (MiB); default: the game config's model.prefix_cache_mib",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=0,
        help="time this many training steps per run instead of an evaluation (third time column: rollouts)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every game, as `sparring eval --set`",
    )
    args = parser.parse_args()
    model = resolve_model_name(args.model, args.quick)
    third = "rollouts" if args.train_steps else "CPU"
    rows = []
    for game in args.games.split(","):
        runs: dict[str, list[tuple[PrefillCounts, float, float]]] = {"off": [], "on": []}

        def measure(game: str, mib: float, seed: int, warm_up: bool = False) -> tuple[PrefillCounts, float, float]:
            if game == "conversations":
                return converse_once(model, args.device, 5, mib)
            if args.train_steps:
                return train_once(game, model, args.device, 1 if warm_up else args.train_steps, mib, args.overrides)
            return evaluate_once(game, model, args.device, 1 if warm_up else args.tasks, mib, seed, args.overrides)

        on_mib = args.cache_mib or (CACHE_MIB if game == "conversations" else shipped_cache_mib(game, args.overrides))
        measure(game, on_mib, seed=1, warm_up=True)  # model loaded, weights packed, code paths compiled
        for repeat in range(args.repeats):
            for setting, mib in (("off", 0), ("on", on_mib)):
                counts, seconds, cpu = measure(game, mib, seed=repeat)
                runs[setting].append((counts, seconds, cpu))
                hit_rate = counts.metrics()["engine/prefix_hit_rate"]
                print(
                    f"{game} cache {setting}: {counts.prompt_tokens} prompt tokens, "
                    f"{counts.prefilled_tokens} prefilled, hit rate {hit_rate:.2f}, {seconds:.1f} s, "
                    f"{third} {cpu:.1f} s",
                    flush=True,
                )
        prefilled = {s: statistics.median(c.prefilled_tokens for c, _, _ in runs[s]) for s in runs}
        prompt = {s: statistics.median(c.prompt_tokens for c, _, _ in runs[s]) for s in runs}
        wall = {s: min(t for _, t, _ in runs[s]) for s in runs}
        cpu = {s: min(t for _, _, t in runs[s]) for s in runs}
        fewer = f"{prefilled['off'] / max(prefilled['on'], 1):.2f}x"
        size = (
            "7x5 turns" if game == "conversations" else f"{args.train_steps} steps" if args.train_steps else args.tasks
        )
        rows.append(
            [
                game,
                size,
                prompt["off"],
                prompt["on"],
                prefilled["off"],
                prefilled["on"],
                fewer,
                wall["off"],
                wall["on"],
                f"{wall['off'] / wall['on']:.2f}x",
                f"{cpu['off'] / cpu['on']:.2f}x",
            ]
        )
    print()
    print_table(
        [
            "game",
            "steps" if args.train_steps else "tasks",
            "prompt off",
            "prompt on",
            "prefilled off",
            "prefilled on",
            "fewer",
            "s off",
            "s on",
            "faster",
            third,
        ],
        rows,
    )


if __name__ == "__main__":
    main()
