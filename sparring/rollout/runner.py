"""The runner: tasks in, finished episodes out.

`run_episodes` starts `group_size` episodes per task, all concurrently under
a concurrency bound, each with its own recorder and a timeout on its own
time (see `player` and `episode_clock`); because every episode's model calls
reach the engine at about the same time, they are sampled in shared batches.
Given a seed, each episode seeds its calls from it and its own index
(`sampling_seeds.py`), so how the batches form never changes what it samples.
An episode's fault is data, never a dead run: one that raises, times out, or
returns an outcome that does not fit (`outcomes.ERROR_KINDS`: a non-finite
reward, a string metric, a wrong return type, ...) becomes an error episode
with the penalty reward, its error and its `error_kind`, and the step goes
on with the others. Rewards come from the workflow's output (one for all
trainable agents, or one per agent) or, when it gives none, from the judge.

Where the workflow itself runs is the one seam: `RunnerSettings.play`, an
`EpisodePlayer` (`player.py`). `play_in_process` runs it here, in this event
loop; another player (the Ray runner, `sparring.runners.ray`)
runs it elsewhere while its model calls still come back to this process's
recorder. Either way the recorder, rewards, timelines and errors are
handled here, the same way. A player that fails itself (not the episode)
raises `RunnerError`, which stops the run instead of becoming an error
episode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..runner_defaults import EPISODE_TIMEOUT_S, ERROR_REWARD, GROUP_SIZE, MAX_CONCURRENCY
from .outcomes import EpisodeFault, checked_outcome
from .player import EpisodePlayer, play_in_process
from .recorder import EpisodeRecorder, recording
from .sampling_seeds import derived_seed
from .timelines import merge_calls
from .types import Episode
from .workflow import EpisodeFn, ModelRouter

log = logging.getLogger(__name__)


class RunnerError(RuntimeError):
    """The runner itself failed, not the episode (e.g. a workflow that cannot reach a worker): the run stops."""


@dataclass
class RunnerSettings:
    """How episodes are run."""

    group_size: int = GROUP_SIZE
    """Episodes per task; they share an advantage baseline."""
    max_concurrency: int = MAX_CONCURRENCY
    """Most episodes running at once."""
    episode_timeout_s: float = EPISODE_TIMEOUT_S
    """An episode whose own time (queued time for the shared sampler shared out) passes this is cancelled and counted
    as an error (kind 'timeout'); one that ignores the cancellation is abandoned `player.CANCEL_GRACE_S` later."""
    error_reward: float = ERROR_REWARD
    """Reward given to the agents of an error episode (it raised, timed out, or returned an outcome that does not
    fit)."""
    play: EpisodePlayer = play_in_process
    """Where each workflow runs: in this process, or elsewhere (Ray workers) with its model calls sent back here."""


async def run_episodes(
    episode_fn: EpisodeFn,
    tasks: list[dict],
    make_tuner: Callable[[], ModelRouter],
    settings: RunnerSettings,
    judge: Callable | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    seed: int | None = None,
) -> list[Episode]:
    """Run every task `group_size` times; episodes come back grouped by task, in task order.

    `on_episode` is called with each episode as it finishes (progress displays). With a `seed`, the k-th episode
    (in that order) seeds its unseeded calls from (seed, k), so what it samples does not depend on timing.
    """
    slots = asyncio.Semaphore(settings.max_concurrency)

    async def bounded(task: dict, group: int, sampling_seed: int | None) -> Episode:
        async with slots:
            tuner = make_tuner()
            episode = await run_episode(episode_fn, task, group, tuner, settings, judge, sampling_seed, warn=False)
        if on_episode is not None:
            on_episode(episode)
        return episode

    runs = [(task, group) for group, task in enumerate(tasks) for _ in range(settings.group_size)]
    seeds = [None if seed is None else derived_seed(seed, index) for index in range(len(runs))]
    episodes = list(
        await asyncio.gather(*(bounded(task, group, seed) for (task, group), seed in zip(runs, seeds, strict=True)))
    )
    warn_failures(episodes)
    return episodes


def warn_failures(episodes: list[Episode]) -> None:
    """One warning per kind of failure among `episodes` (how many, on which tasks, the first error), not one an
    episode."""
    by_kind: dict[str, list[Episode]] = {}
    for episode in episodes:
        if episode.error is not None:
            by_kind.setdefault(episode.error_kind or "exception", []).append(episode)
    for kind, failed in by_kind.items():
        tasks = list(dict.fromkeys(str(episode.task.get("task_id")) for episode in failed))
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        others = len({episode.error for episode in failed}) - 1
        also = f" (and {others} other message{'s' * (others > 1)})" if others else ""
        plural = "s" * (len(tasks) > 1)
        log.warning(
            "%d of %d episodes failed (%s), task%s %s: %s%s",
            len(failed),
            len(episodes),
            kind,
            plural,
            shown,
            failed[0].error,
            also,
        )


async def run_episode(
    episode_fn: EpisodeFn,
    task: dict,
    group: int,
    tuner: ModelRouter,
    settings: RunnerSettings,
    judge: Callable | None,
    sampling_seed: int | None = None,
    warn: bool = True,
) -> Episode:
    """One episode; a failed one is logged (unless `warn` is off: `run_episodes` collapses its episodes' failures)."""
    recorder = EpisodeRecorder(sampling_seed=sampling_seed)
    error = error_kind = outcome = None
    with recording(recorder):
        try:
            output = await settings.play(episode_fn, task, tuner, settings.episode_timeout_s)
            outcome = await checked_outcome(output, task, tuner, judge, recorder.policy_calls())
        except asyncio.TimeoutError as exc:
            error, error_kind = str(exc) or f"timed out after {settings.episode_timeout_s:g}s", "timeout"
        except RunnerError:
            raise
        except EpisodeFault as fault:
            error, error_kind = str(fault), fault.kind
        except Exception as exc:  # noqa: BLE001 - an episode's failure is data (penalty reward + error metric)
            error, error_kind = f"{type(exc).__name__}: {exc}", "exception"
    if outcome is None and warn:
        log.warning("episode of task %s failed (%s): %s", task.get("task_id"), error_kind, error)
    rewards = outcome.rewards if outcome else {agent: settings.error_reward for agent in _trained_agents(recorder)}
    return Episode(
        task=task,
        group=group,
        timelines=merge_calls(recorder.calls),
        rewards=rewards,
        metrics=outcome.metrics if outcome else {},
        roles=dict(recorder.roles),
        error=error,
        error_kind=error_kind,
        transcripts=recorder.transcripts,
        num_calls=len(recorder.calls),
        turn_rewards=outcome.turn_rewards if outcome else {},
        reward=outcome.reward if outcome else None,
        baseline_group=outcome.baseline_group if outcome else None,
    )


def _trained_agents(recorder: EpisodeRecorder) -> list[str]:
    """The agents that played in the trainable slot (trainable calls, or a scripted baseline's): they get the reward."""
    return sorted(recorder.policy_calls())
