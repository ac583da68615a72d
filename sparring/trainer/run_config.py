"""The run's mechanics, each a section of its own: where and how episodes run (`runner:`), when the held-out tasks
are evaluated (`evaluation:`), when checkpoints are written (`checkpoints:`).

None of them is part of the RL algorithm, so none lives in `algorithm:` any more. Their old flat keys there
(`algorithm.save_interval_steps`, `algorithm.runner`, ...; `MOVED_KEYS`) are read for one more release:
`MovedAlgorithmKeys` declares them on `AlgorithmConfig` (so YAML, `--set` and `AlgorithmConfig(...)` keyword
arguments keep working, checked against the same bounds), one log line names the new keys, and
`TuneConfig` moves the values into their sections (`move_into_sections`). Each bound is declared once, as
the annotated types below, for the new key and its old name alike.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ..runner_defaults import EPISODE_TIMEOUT_S, ERROR_REWARD, MAX_CONCURRENCY
from .config_limits import (
    MAX_ABS_REWARD,
    MAX_EPISODE_TIMEOUT_S,
    MAX_RAY_CPUS,
    MAX_STEPS,
    MAX_TASKS,
)
from .config_limits import (
    MAX_CONCURRENCY as CONCURRENCY_LIMIT,
)
from .schema import ConfigRecord

log = logging.getLogger(__name__)

Backend = Literal["local", "ray"]
Concurrency = Annotated[int, Field(ge=1, le=CONCURRENCY_LIMIT)]
Timeout = Annotated[float, Field(gt=0.0, le=MAX_EPISODE_TIMEOUT_S)]
Reward = Annotated[float, Field(ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)]
RayCpus = Annotated[float, Field(gt=0.0, le=MAX_RAY_CPUS)]
Steps = Annotated[int, Field(ge=0, le=MAX_STEPS)]
Count = Annotated[int, Field(ge=1, le=MAX_STEPS)]
Tasks = Annotated[int, Field(ge=1, le=MAX_TASKS)]


class RunnerConfig(ConfigRecord):
    """Where and how each episode's workflow runs: in this process or on Ray, how many at once, for how long."""

    backend: Backend = "local"
    """'local' (this process's event loop) or 'ray' (one Ray task per episode; model calls come back here)."""
    ray_address: str | None = None
    """Ray cluster to run episodes on ('auto', 'host:6379'); None starts a local one (or reuses this process's
    `ray.init`)."""
    ray_num_cpus: RayCpus = 1.0
    """CPUs Ray reserves per episode; below 1 packs several episodes per core (workflows that mostly wait on the
    model)."""
    max_concurrency: Concurrency = MAX_CONCURRENCY
    """Most episodes running at once: bounds the memory and the sampler's queue a step's rollout takes."""
    episode_timeout_s: Timeout = EPISODE_TIMEOUT_S
    """Seconds of an episode's own time (its share of time queued for the shared sampler, not the whole wait) before
    it is cancelled and scored as an error; one that ignores the cancellation is abandoned 2 s later."""
    error_reward: Reward = ERROR_REWARD
    """Reward given to an episode that crashed or timed out, so a bad output is discouraged but the run goes on."""


class EvaluationConfig(ConfigRecord):
    """When the held-out tasks (`eval_dataset`, or the share of the training tasks held out) are evaluated."""

    interval_steps: Steps = 0
    """Evaluate on the held-out tasks every N steps (and after the last); 0 evaluates them before the first step and
    after the last only. A run without held-out tasks evaluates nothing."""
    max_tasks: Tasks | None = None
    """Evaluate on at most this many held-out tasks (the first ones), to bound an evaluation's cost; None uses them
    all."""

    def evaluates_before(self, step: int) -> bool:
        """Whether the held-out tasks are evaluated before `step` (0-based): every `interval_steps`, or before the
        first step when that is 0."""
        return step % self.interval_steps == 0 if self.interval_steps else step == 0


class CheckpointsConfig(ConfigRecord):
    """When the run writes a checkpoint (what it resumes from), and how many it keeps."""

    interval_steps: Steps = 0
    """Write a checkpoint every N steps, so a crash loses at most N steps; 0 writes one only at the end (and on
    SIGINT / SIGTERM)."""
    keep: Count | None = None
    """Keep only the newest N checkpoints: an older one and its models' training states are deleted once a newer one
    is complete (transformers' `save_total_limit`), so saving every step does not fill the disk; None keeps all."""


SECTIONS = {"runner": RunnerConfig, "evaluation": EvaluationConfig, "checkpoints": CheckpointsConfig}
"""The sections by their key in a job."""

MOVED_KEYS = {
    "runner": ("runner", "backend"),
    "ray_address": ("runner", "ray_address"),
    "ray_num_cpus": ("runner", "ray_num_cpus"),
    "max_concurrency": ("runner", "max_concurrency"),
    "episode_timeout_s": ("runner", "episode_timeout_s"),
    "error_reward": ("runner", "error_reward"),
    "eval_interval_steps": ("evaluation", "interval_steps"),
    "eval_tasks": ("evaluation", "max_tasks"),
    "save_interval_steps": ("checkpoints", "interval_steps"),
    "keep_checkpoints": ("checkpoints", "keep"),
}
"""The old `algorithm:` keys, read until the next release, by (section, key) of their new home."""


def _moved(old: str) -> str:
    section, key = MOVED_KEYS[old]
    return f"Deprecated, read until the next release: write `{section}.{key}` instead."


class MovedAlgorithmKeys(BaseModel):
    """The old `algorithm:` keys of the run's mechanics (`MOVED_KEYS`), still accepted; None when not given. A part of
    `AlgorithmConfig` (the `ConfigRecord`), not a section of its own."""

    runner: Backend | None = Field(default=None, exclude=True, description=_moved("runner"))
    ray_address: str | None = Field(default=None, exclude=True, description=_moved("ray_address"))
    ray_num_cpus: RayCpus | None = Field(default=None, exclude=True, description=_moved("ray_num_cpus"))
    max_concurrency: Concurrency | None = Field(default=None, exclude=True, description=_moved("max_concurrency"))
    episode_timeout_s: Timeout | None = Field(default=None, exclude=True, description=_moved("episode_timeout_s"))
    error_reward: Reward | None = Field(default=None, exclude=True, description=_moved("error_reward"))
    eval_interval_steps: Steps | None = Field(default=None, exclude=True, description=_moved("eval_interval_steps"))
    eval_tasks: Tasks | None = Field(default=None, exclude=True, description=_moved("eval_tasks"))
    save_interval_steps: Steps | None = Field(default=None, exclude=True, description=_moved("save_interval_steps"))
    keep_checkpoints: Count | None = Field(default=None, exclude=True, description=_moved("keep_checkpoints"))

    _noted: bool = PrivateAttr(default=False)
    """Whether the deprecation line was logged (pydantic runs this validator again for every config it is part of)."""

    def moved_values(self) -> dict[str, Any]:
        """The old keys this config was given, by old name (an explicit null only where the new key takes one)."""
        return {
            old: getattr(self, old)
            for old, (section, key) in MOVED_KEYS.items()
            if old in self.model_fields_set
            and (getattr(self, old) is not None or SECTIONS[section].model_fields[key].default is None)
        }

    def without_moved_keys(self) -> MovedAlgorithmKeys:
        """A copy with the old keys unset (once `TuneConfig` has moved their values into the sections)."""
        kept = {name: value for name, value in self.__dict__.items() if name not in MOVED_KEYS}
        return type(self).model_construct(_fields_set=self.model_fields_set - set(MOVED_KEYS), **kept)

    @model_validator(mode="after")
    def _deprecation_note(self) -> MovedAlgorithmKeys:
        given = self.moved_values()
        if given and not self._noted:
            self._noted = True
            note_moved_keys(list(given))
        return self


def note_moved_keys(old_keys: list[str]) -> None:
    """Log the one line that says the old `algorithm:` keys `old_keys` are deprecated and names their new keys."""
    renamed = ", ".join(f"algorithm.{old} -> {'.'.join(MOVED_KEYS[old])}" for old in old_keys)
    log.warning("deprecated config keys, read until the next release; write them as %s", renamed)


def move_into_sections(algorithm: MovedAlgorithmKeys, sections: dict[str, ConfigRecord]) -> dict[str, ConfigRecord]:
    """`sections` (by key) with the old `algorithm` keys' values moved in; a ValueError when an old key and its new
    one are both given and disagree."""
    updates: dict[str, dict[str, Any]] = {}
    for old, value in algorithm.moved_values().items():
        section, key = MOVED_KEYS[old]
        record = sections[section]
        if key in record.model_fields_set and getattr(record, key) != value:
            raise ValueError(
                f"algorithm.{old}: moved to {section}.{key}, which is also given (as {getattr(record, key)!r}, "
                f"here {value!r}); keep {section}.{key} only"
            )
        updates.setdefault(section, {})[key] = value
    return {
        name: record.model_copy(update=updates[name]) if name in updates else record
        for name, record in sections.items()
    }
