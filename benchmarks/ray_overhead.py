"""What running an episode as a Ray task costs over running it in process.

The same small workflows on the tiny random model, one episode at a time,
alternating in-process and Ray (`runner: ray`, a local cluster started the
way `tune()` starts it) in the same run, after a warm-up that lets the Ray
workers import sparring:

- `no_calls`: the workflow returns at once — the cost of dispatching an
  episode (submit the task, the worker starts it and reports back);
- `two_calls`: two seeded model calls (4 tokens each) — adds the cost of each
  call's trip from the worker to the trainer's sampler and back.

Prints the median wall time per episode of each, and the difference.

    .venv/bin/python benchmarks/ray_overhead.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from sparring import ServiceClient, TunerHandle, WorkflowOutput
from sparring.models import build_tiny_model
from sparring.rollout import PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes
from sparring.runners.ray import ray_runner


async def no_calls(task, model, auxiliary_models):
    return WorkflowOutput(reward=0.0)


async def two_calls(task, model, auxiliary_models):
    history = [{"role": "user", "content": "hello"}]
    first = await model(history, seed=1, max_tokens=4)
    await model([*history, first.message, {"role": "user", "content": "again"}], seed=2, max_tokens=4)
    return WorkflowOutput(reward=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    model_dir = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", seed=0)
    client = ServiceClient(base_dir=tempfile.mkdtemp()).create_lora_training_client(str(model_dir), rank=4, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"))
    make_tuner = lambda: TunerHandle(policies={"policy": policy})  # noqa: E731
    runner = ray_runner()
    players = {"in process": RunnerSettings(group_size=1), "ray": RunnerSettings(group_size=1, play=runner.play)}
    workflows = {"no_calls": as_episode_fn(no_calls), "two_calls": as_episode_fn(two_calls)}

    def episode_time(episode_fn, settings) -> float:
        started = time.perf_counter()
        (episode,) = asyncio.run(run_episodes(episode_fn, [{"task_id": "0"}], make_tuner, settings))
        assert episode.error is None, episode.error
        return time.perf_counter() - started

    for _ in range(3):  # warm-up: the engine, and the Ray workers importing sparring
        for episode_fn in workflows.values():
            for settings in players.values():
                episode_time(episode_fn, settings)
    times = {(w, p): [] for w in workflows for p in players}
    for _ in range(args.rounds):
        for w, episode_fn in workflows.items():
            for p, settings in players.items():
                times[w, p].append(episode_time(episode_fn, settings))
    print(f"median seconds per episode over {args.rounds} interleaved rounds")
    print(f"{'workflow':<10} {'in process':>11} {'ray':>8} {'overhead':>9}")
    for w in workflows:
        local, ray = statistics.median(times[w, "in process"]), statistics.median(times[w, "ray"])
        print(f"{w:<10} {local:>11.4f} {ray:>8.4f} {ray - local:>9.4f}")


if __name__ == "__main__":
    main()
