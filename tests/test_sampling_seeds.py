"""Seeded episodes sample from what each call is (episode, agent, call number), not from when it reaches the engine."""

import asyncio
import random
import subprocess
import sys

from sparring import TunerHandle
from sparring.rollout import (
    EpisodeRecorder,
    RunnerSettings,
    ScriptedChatModel,
    WorkflowOutput,
    as_episode_fn,
    run_episodes,
)
from sparring.rollout.sampling_seeds import derived_seed

TASKS = [{"task_id": str(index)} for index in range(6)]


def jittered(delays: random.Random):
    """Three turns of the policy, each answered by the frozen helper, after a pause drawn from `delays`: another
    `delays` makes the episodes' calls reach the engine in another order and in other batches."""

    async def workflow(task, model, auxiliary_models):
        history = [{"role": "user", "content": f"game {task['task_id']}"}]
        for _ in range(3):
            await asyncio.sleep(delays.random() * 0.02)
            reply = await model(history)
            answer = await auxiliary_models["helper"]([{"role": "user", "content": reply.content or "?"}])
            history += [reply.message, {"role": "user", "content": answer.content or "?"}]
        return WorkflowOutput(reward=0.0)

    return workflow


def replies(policy, frozen, delays_seed: int, seed: int | None) -> list[list[tuple[str, str]]]:
    """Every episode's replies (agent, text) in call order, from a run whose pauses come from `delays_seed`."""
    tuner = lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": frozen})  # noqa: E731
    episodes = asyncio.run(
        run_episodes(
            as_episode_fn(jittered(random.Random(delays_seed))), TASKS, tuner, RunnerSettings(group_size=2), seed=seed
        )
    )
    return [
        [
            (agent, entry["response"]["content"])
            for agent, entries in sorted(episode.transcripts.items())
            for entry in entries
        ]
        for episode in episodes
    ]


def test_a_seeded_run_samples_the_same_tokens_however_its_calls_interleave(policy_and_helper):
    policy, frozen = policy_and_helper
    assert replies(policy, frozen, delays_seed=1, seed=5) == replies(policy, frozen, delays_seed=2, seed=5)
    # What the seed fixes: without it the engine seeds requests in arrival order, which the pauses change.
    assert replies(policy, frozen, delays_seed=1, seed=None) != replies(policy, frozen, delays_seed=2, seed=None)
    # Episodes of one group draw differently, and another seed draws other tokens.
    seeded = replies(policy, frozen, delays_seed=1, seed=5)
    assert seeded[0] != seeded[1]
    assert seeded != replies(policy, frozen, delays_seed=1, seed=6)


def test_a_scripted_policy_draws_per_episode_and_call_in_a_seeded_run(policy_and_helper):
    _, frozen = policy_and_helper
    draws = ScriptedChatModel(lambda messages, rng: f"{rng.random():.12f}", name="uniform")
    assert replies(draws, frozen, delays_seed=1, seed=5) == replies(draws, frozen, delays_seed=2, seed=5)


def test_call_seeds_number_each_agents_calls_and_are_the_same_in_every_process():
    recorder = EpisodeRecorder(sampling_seed=11)
    first, other, second = recorder.call_seed("a"), recorder.call_seed("b"), recorder.call_seed("a")
    assert (first, other, second) == (derived_seed(11, "a", 0), derived_seed(11, "b", 0), derived_seed(11, "a", 1))
    assert len({first, other, second}) == 3 and all(0 <= seed < 2**32 for seed in (first, other, second))
    assert EpisodeRecorder().call_seed("a") is None
    # Not Python's salted `hash`: a fresh interpreter derives the same seed.
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sparring.rollout.sampling_seeds import derived_seed; print(derived_seed(0, 'policy', 0))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(fresh.stdout) == derived_seed(0, "policy", 0)
