"""The runner: tasks in, finished episodes out.

`run_episodes` starts `group_size` episodes per task, all concurrently under
a concurrency bound, each with its own recorder and a timeout; because every
episode's model calls reach the engine at about the same time, they are
sampled in shared batches. An episode that raises or times out becomes data,
not a dead run: it gets the penalty reward and an error, and the run goes on.
Rewards come from the workflow's output (one for all trainable agents, or one
per agent) or, when it gives none, from the judge.

Where the workflow itself runs is the one seam: `RunnerSettings.play`, an
`EpisodePlayer`. `play_in_process` runs it here, in this event loop; another
player (the Ray runner, `sparring.integrations.ray_runner`) runs it elsewhere
while its model calls still come back to this process's recorder. Either way
the recorder, rewards, timelines and errors are handled here, the same way. A
player that fails itself (not the episode) raises `RunnerError`, which stops
the run instead of becoming an error episode.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from .recorder import EpisodeRecorder, recording
from .timelines import merge_calls
from .types import Episode, JudgeOutput, WorkflowOutput
from .workflow import EpisodeFn, ModelRouter

log = logging.getLogger(__name__)

EpisodePlayer = Callable[[EpisodeFn, dict, ModelRouter, float], Awaitable[Any]]
"""`play(episode_fn, task, tuner, timeout_s) -> output`: runs one episode's workflow inside its recorder; raises
TimeoutError once the episode's own time passes `timeout_s`."""


class RunnerError(RuntimeError):
    """The runner itself failed, not the episode (e.g. a workflow that cannot reach a worker): the run stops."""


async def play_in_process(episode_fn: EpisodeFn, task: dict, tuner: ModelRouter, timeout_s: float) -> Any:
    """Run the workflow in this event loop, cancelled after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    output = await asyncio.wait_for(episode_fn(task, tuner), timeout_s)
    if loop.time() > deadline:
        raise asyncio.TimeoutError  # the workflow swallowed the cancellation and returned anyway
    return output


@dataclass
class RunnerSettings:
    """How episodes are run."""

    group_size: int = 8
    """Episodes per task; they share an advantage baseline."""
    max_concurrency: int = 64
    """Most episodes running at once."""
    episode_timeout_s: float = 300.0
    """An episode running longer is stopped and counted as an error."""
    error_reward: float = -0.1
    """Reward given to the agents of an episode that raised or timed out."""
    play: EpisodePlayer = play_in_process
    """Where each workflow runs: in this process, or elsewhere (Ray workers) with its model calls sent back here."""


async def run_episodes(
    episode_fn: EpisodeFn,
    tasks: list[dict],
    make_tuner: Callable[[], ModelRouter],
    settings: RunnerSettings,
    judge: Callable | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run every task `group_size` times; episodes come back grouped by task, in task order.

    `on_episode` is called with each episode as it finishes (progress displays).
    """
    slots = asyncio.Semaphore(settings.max_concurrency)

    async def bounded(task: dict, group: int) -> Episode:
        async with slots:
            episode = await run_episode(episode_fn, task, group, make_tuner(), settings, judge)
        if on_episode is not None:
            on_episode(episode)
        return episode

    return list(await asyncio.gather(*(bounded(task, group) for group, task in enumerate(tasks) for _ in range(settings.group_size))))


async def run_episode(episode_fn: EpisodeFn, task: dict, group: int, tuner: ModelRouter, settings: RunnerSettings, judge: Callable | None) -> Episode:
    recorder = EpisodeRecorder()
    error, output, rewards, metrics, turn_rewards = None, None, {}, {}, {}
    with recording(recorder):
        try:
            output = await settings.play(episode_fn, task, tuner, settings.episode_timeout_s)
            rewards, metrics = await _rewards(output, task, tuner, judge, _trained_agents(recorder))
            turn_rewards = _turn_rewards(output.turn_rewards, recorder)
        except asyncio.TimeoutError:
            error = f"timed out after {settings.episode_timeout_s:g}s"
        except RunnerError:
            raise
        except Exception as exc:  # noqa: BLE001 - an episode's failure is data (penalty reward + error metric)
            error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        log.warning("episode of task %s failed: %s", task.get("task_id"), error)
        rewards, turn_rewards = {agent: settings.error_reward for agent in _trained_agents(recorder)}, {}
    timelines = merge_calls(recorder.calls)
    return Episode(
        task=task,
        group=group,
        timelines=timelines,
        rewards=rewards,
        metrics={**metrics, "error": float(error is not None)},
        roles=dict(recorder.roles),
        error=error,
        transcripts=recorder.transcripts,
        num_calls=len(recorder.calls),
        turn_rewards=turn_rewards,
    )


def _trained_agents(recorder: EpisodeRecorder) -> list[str]:
    """The agents that played in the trainable slot (trainable calls, or a scripted baseline's): they get the reward."""
    return sorted(recorder.policy_calls())


def _turn_rewards(given: list[float] | dict[str, list[float]] | None, recorder: EpisodeRecorder) -> dict[str, list[float]]:
    """`WorkflowOutput.turn_rewards` as one checked list per agent, as long as that agent's trainable (or scripted) calls."""
    if given is None:
        return {}
    calls = recorder.policy_calls()
    if not isinstance(given, dict):
        if len(calls) != 1:
            raise ValueError(f"turn_rewards is one list but {len(calls)} trainable agents made calls ({sorted(calls)}); give a list per agent name")
        given = {next(iter(calls)): given}
    checked = {}
    for agent, values in given.items():
        if agent not in calls:
            raise ValueError(f"turn_rewards names {agent!r}, which made no trainable call; agents with calls: {sorted(calls)}")
        if len(values) != calls[agent]:
            raise ValueError(f"turn_rewards[{agent!r}] has {len(values)} values but the agent made {calls[agent]} trainable calls")
        checked[agent] = [float(value) for value in values]
        if not all(math.isfinite(value) for value in checked[agent]):
            raise ValueError(f"turn_rewards[{agent!r}] holds a value that is not a finite number: {values}")
    return checked


async def _rewards(output, task: dict, tuner: ModelRouter, judge: Callable | None, agents: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    if not isinstance(output, WorkflowOutput):
        raise TypeError(f"the workflow returned {type(output).__name__}; it must return WorkflowOutput(reward=..., metrics=...)")
    reward, metrics = output.reward, dict(output.metrics)
    if reward is None:
        if judge is None:
            raise ValueError("the workflow returned reward=None and no judge_func is configured")
        judged = judge(task, output.response, tuner.auxiliary_models)
        judged = await judged if inspect.isawaitable(judged) else judged
        if not isinstance(judged, JudgeOutput):
            raise TypeError(f"the judge returned {type(judged).__name__}; it must return JudgeOutput(reward=..., metrics=...)")
        reward = judged.reward
        metrics.update({f"judge/{k}": v for k, v in judged.metrics.items()})
    if isinstance(reward, dict):
        missing = [agent for agent in agents if agent not in reward]
        if missing:
            raise ValueError(f"the reward dict {sorted(reward)} has no entry for trainable agents {missing}")
        return {agent: float(reward[agent]) for agent in agents}, metrics
    return {agent: float(reward) for agent in agents}, metrics
