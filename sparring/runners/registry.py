"""Runners by name: `runner.backend` says where each episode's workflow runs, `make_player` makes that player.

The rollout layer runs every episode through one seam, `RunnerSettings.play`
(an `EpisodePlayer`, `sparring.rollout.player`); a runner is what fills it.
`RUNNERS` holds each runner's factory under its `runner.backend` value:

- 'local': `play_in_process`, the workflow as a task of this process's event loop;
- 'ray': `RayRunner.play` (`ray.py`), the workflow as a Ray task whose model
  calls come back to this process (`episode_link.py`).

A factory checks what it can before any model loads, so a run that cannot
work fails first: for Ray, that the workflow pickles, then that the cluster
answers. Ray is an optional extra: it is imported only when 'ray' is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..rollout.player import EpisodePlayer, play_in_process
from ..rollout.workflow import EpisodeFn


class RunnerChoice(Protocol):
    """The fields that pick and place a runner, as the config's `RunnerConfig` has them (the trainer's config sits
    above this layer)."""

    backend: str
    """A key of `RUNNERS`."""
    ray_address: str | None
    """The Ray cluster to join ('auto', 'host:6379'); None starts a local one."""
    ray_num_cpus: float
    """CPUs Ray reserves per episode."""


RunnerFactory = Callable[[RunnerChoice, EpisodeFn], EpisodePlayer]
"""`factory(choice, episode_fn) -> play`: the runner's player for this workflow, once what can be checked early
holds."""


def _in_process(choice: RunnerChoice, episode_fn: EpisodeFn) -> EpisodePlayer:
    return play_in_process  # nothing to check, nothing to start


def _on_ray(choice: RunnerChoice, episode_fn: EpisodeFn) -> EpisodePlayer:
    from .ray import check_sendable, ray_runner  # here, not at the top: Ray is needed only when chosen

    check_sendable(episode_fn)  # an unpicklable workflow fails here, before any model loads
    return ray_runner(choice.ray_address, choice.ray_num_cpus).play  # so does an unreachable cluster


RUNNERS: dict[str, RunnerFactory] = {"local": _in_process, "ray": _on_ray}
"""Every runner by its `runner.backend` name."""


def make_player(choice: RunnerChoice, episode_fn: EpisodeFn) -> EpisodePlayer:
    """The player of the runner `choice.backend` names, for `episode_fn`; its early checks have passed."""
    factory = RUNNERS.get(choice.backend)
    if factory is None:
        raise ValueError(f"runner.backend: no runner {choice.backend!r}; use one of {', '.join(map(repr, RUNNERS))}")
    return factory(choice, episode_fn)
