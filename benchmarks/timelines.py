"""What timeline merging saves: one sequence per multi-turn conversation vs one per model call.

Runs real multi-turn episodes (guess the number, 4 turns, SmolLM2 by default),
then builds the training data twice from the same episodes:

- merged: what sparring trains — one datum per agent conversation, every
  completion loss-masked in;
- per call: one datum per model call (its whole prompt + its completion), what a
  trainer without prefix merging would send.

Both are trained with forward_backward on the same fresh adapter; the table
shows tokens processed and wall time of each, and their ratio, measured in
the same run.

    .venv/bin/python benchmarks/timelines.py [--episodes 16] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from sparring import ServiceClient, TunerHandle, types
from sparring.algorithms import build_datums
from sparring.envs.guess_number import guess_number, make_tasks
from sparring.rollout import PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes


def per_call_datums(merged: list[types.Datum]) -> list[types.Datum]:
    """Split each merged datum at the end of every completion run: the data one-datum-per-call would give."""
    split = []
    for datum in merged:
        tokens = datum.model_input.to_ints()
        targets = datum.loss_fn_inputs["target_tokens"].tolist()
        logprobs = datum.loss_fn_inputs["logprobs"].tolist()
        advantages = datum.loss_fn_inputs["advantages"].tolist()
        start = None
        for position, advantage in enumerate([*advantages, 0.0]):
            if advantage != 0.0 and start is None:
                start = position
            elif advantage == 0.0 and start is not None:
                split.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens[:position]),
                        loss_fn_inputs={
                            "target_tokens": targets[:position],
                            "logprobs": logprobs[:position],
                            "advantages": [0.0] * start + advantages[start:position],
                        },
                    )
                )
                start = None
    return split


def timed_forward_backward(client, data: list[types.Datum]) -> float:
    started = time.perf_counter()
    client.forward_backward(data, "ppo").result()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()
    service = ServiceClient()
    client = service.create_lora_training_client(args.model, rank=16, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 12})
    tasks = [{**task, "workflow_args": {"low": 1, "high": 1000, "max_turns": 4}} for task in make_tasks("train", args.episodes, seed=7, low=1, high=1000)]
    episodes = await run_episodes(as_episode_fn(guess_number), tasks, lambda: TunerHandle(policies={"policy": policy}), RunnerSettings(group_size=1))
    # Unit advantages on every sampled token: the benchmark measures data size and time, not learning.
    merged = build_datums(episodes, {(i, agent): 1.0 for i, e in enumerate(episodes) for agent in e.rewards})["policy"]
    per_call = per_call_datums(merged)
    assert sum(len(d.model_input.to_ints()) for d in merged) <= sum(len(d.model_input.to_ints()) for d in per_call)
    timed_forward_backward(client, merged[:2])  # warm-up
    rows = []
    for name, data in (("merged timelines", merged), ("one datum per call", per_call)):
        tokens = sum(d.model_input.length for d in data)
        rows.append((name, len(data), tokens, timed_forward_backward(client, data)))
    print(f"{args.episodes} episodes of guess the number (4 turns), {args.model}, forward_backward with ppo")
    print(f"{'assembly':<22}{'datums':>8}{'tokens':>10}{'fwd+bwd s':>12}")
    for name, count, tokens, seconds in rows:
        print(f"{name:<22}{count:>8}{tokens:>10}{seconds:>12.2f}")
    (_, _, merged_tokens, merged_s), (_, _, call_tokens, call_s) = rows
    print(f"merging processes {call_tokens / merged_tokens:.2f}x fewer tokens and runs {call_s / merged_s:.2f}x faster")


if __name__ == "__main__":
    asyncio.run(main())
