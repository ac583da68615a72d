"""What the engine's prefix cache saves: a held-out evaluation with the cache on vs off, in the same run.

Each game's packaged config is evaluated as `sparring eval GAME --tasks N` does (`run_evaluation`: the model,
then the config's baselines, on the first N held-out tasks), alternating cache off and on on one engine
(`Engine.set_prefix_cache`, emptied before every run; the engine's seed stream restarted, so both see the
same requests as far as batching allows). Per run: prompt tokens, tokens actually prefilled (a prefix shared
inside one batch counts once, with the cache off too), wall time and the process's CPU time; the table prints
each setting's best times and median prefilled tokens, and their ratios (off / on).

Games: werewolf (7 players, 2 rounds: every player re-reads the rules and the day's talk every turn),
twenty_questions (a policy asks, a frozen answerer reads the growing conversation), guess_number (4 turns).

    .venv/bin/python benchmarks/prefix_cache.py [--games werewolf,twenty_questions,guess_number] [--tasks 4] [--repeats 1] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from sparring import EngineConfig
from sparring.engine import get_engine
from sparring.engine.prefix_cache import PrefillCounts
from sparring.envs import load_config
from sparring.trainer.loop import run_evaluation

from common import print_table, resolve_model_name

GAMES = ("werewolf", "twenty_questions", "guess_number")
CACHE_MIB = 1024


def evaluate_once(game: str, model: str, tasks: int, mib: float, seed: int) -> tuple[PrefillCounts, float, float]:
    """One `sparring eval`-equivalent run of `game` on `tasks` tasks with a `mib` MiB prefix cache (0: off): what it
    prefilled, its wall time and the process's CPU time (less sensitive to other jobs on a shared machine)."""
    auxiliary = load_config(game).auxiliary_models
    config = load_config(game, [f"model.model_path={model}", "logging.console=false", *(f"auxiliary_models.{name}.model_path={model}" for name in auxiliary)])
    engine = get_engine(model, EngineConfig())
    engine.set_prefix_cache(mib).result()
    engine.reseed(seed)
    before = PrefillCounts() + engine.prefill_counts
    started, cpu_started = time.perf_counter(), time.process_time()
    asyncio.run(run_evaluation(config, limit=tasks))
    return engine.prefill_counts - before, time.perf_counter() - started, time.process_time() - cpu_started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default=",".join(GAMES))
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks (games) per evaluation")
    parser.add_argument("--repeats", type=int, default=1, help="off/on pairs per game")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--quick", action="store_true", help="the tiny random model: a smoke test, not a measurement")
    args = parser.parse_args()
    model = resolve_model_name(args.model, args.quick)
    rows = []
    for game in args.games.split(","):
        runs: dict[str, list[tuple[PrefillCounts, float, float]]] = {"off": [], "on": []}
        evaluate_once(game, model, 1, CACHE_MIB, seed=1)  # warm-up: model loaded, weights packed, code paths compiled
        for repeat in range(args.repeats):
            for setting, mib in (("off", 0), ("on", CACHE_MIB)):
                counts, seconds, cpu = evaluate_once(game, model, args.tasks, mib, seed=repeat)
                runs[setting].append((counts, seconds, cpu))
                hit_rate = counts.metrics()["engine/prefix_hit_rate"]
                print(f"{game} cache {setting}: {counts.prompt_tokens} prompt tokens, {counts.prefilled_tokens} prefilled, hit rate {hit_rate:.2f}, {seconds:.1f} s, CPU {cpu:.1f} s", flush=True)
        prefilled = {s: statistics.median(c.prefilled_tokens for c, _, _ in runs[s]) for s in runs}
        prompt = {s: statistics.median(c.prompt_tokens for c, _, _ in runs[s]) for s in runs}
        wall = {s: min(t for _, t, _ in runs[s]) for s in runs}
        cpu = {s: min(t for _, _, t in runs[s]) for s in runs}
        fewer = f"{prefilled['off'] / max(prefilled['on'], 1):.2f}x"
        rows.append([game, args.tasks, prompt["off"], prompt["on"], prefilled["off"], prefilled["on"], fewer, wall["off"], wall["on"], f"{wall['off'] / wall['on']:.2f}x", f"{cpu['off'] / cpu['on']:.2f}x"])
    print()
    print_table(["game", "tasks", "prompt off", "prompt on", "prefilled off", "prefilled on", "fewer", "s off", "s on", "faster", "CPU"], rows)


if __name__ == "__main__":
    main()
