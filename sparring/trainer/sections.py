"""The sections of a job config beside its models and algorithm, one record each: what the YAML says and its checks.

A section is a `ConfigRecord` of its own, so each is read, bounded and reported like the rest of the config and
imports nothing heavy; what a section makes happen lives with the code that does it (named below).

- `DatasetConfig` (`train_dataset`, `eval_dataset`, `validation.dataset`): where tasks come from -- a file, a dataset
  folder or an in-memory list of tasks -- and how they are iterated and prepared (`workflow_args` merged into every
  task); reading it is `dataset.py`.
- `LeagueConfig` (`league:`): which opponents a two- or n-player workflow trains against, and how they are drawn. A
  league's pool holds frozen snapshots of the policy (one taken every `snapshot_every_steps`, at most
  `max_snapshots`, evicted by `eviction`), scripted opponents (`scripted`: a `policy(messages, rng) -> reply` by
  import path, the same contract as `baselines:`) and frozen auxiliary models (`models`: names in
  `auxiliary_models`). Every training episode draws one opponent by `sampling` (`algorithms.opponent_sampling`); the
  pool at run time is `League` (`models.py`). `check_fits` holds the section against the job around it.
- `ValidationConfig` (`validation:`): which of a run's adapters it keeps as `best`. A run's last adapter is not
  always its best: in self-play the policy can swing from one snapshot to the next (docs/results.md, tic-tac-toe).
  The run plays the validation tasks with its current weights after every `every_steps` steps from `from_step` on,
  and after its last step, and keeps the weights that scored best on `metric` as the sampler weights `best`, beside
  `final`. The validation tasks are not the held-out ones: a choice made on those would bias the number they report.
  The choice runs in `BestAdapter` (`evaluation.py`).
- `WarmStartConfig` (`warm_start:`): supervised steps on worked examples before the first RL step (`step.py`).
- `LoggingConfig` (`logging:`): where metrics and rollouts go (TensorBoard, Weights & Biases, the console).
- `CollapseResponseConfig` (`algorithm.collapse_response`): what the trainer does when a step's groups keep tying;
  the rule is `algorithms.collapse.CollapseResponse`. The exploration of every rollout is logged as
  `collapse/exploration`, and a resumed run continues from the last one logged.
- `EntropyTargetConfig` (`algorithm.entropy_target`): an entropy bonus whose coefficient is steered towards a target
  entropy; the rule is `algorithms.entropy_steering`. The coefficient of every update is logged as
  `optim/entropy_coef`, and a resumed run continues from the last one logged.
- The run's mechanics, each a section of its own: where and how episodes run (`RunnerConfig`, `runner:`), when the
  held-out tasks are evaluated (`EvaluationConfig`, `evaluation:`), when checkpoints are written
  (`CheckpointsConfig`, `checkpoints:`). None of them is part of the RL algorithm, so none lives in `algorithm:` any
  more. Their old flat keys there (`algorithm.save_interval_steps`, `algorithm.runner`, ...; `MOVED_KEYS`) are read
  for one more release: `MovedAlgorithmKeys` declares them on `AlgorithmConfig` (so YAML, `--set` and
  `AlgorithmConfig(...)` keyword arguments keep working, checked against the same bounds), one log line names the
  new keys, and `TuneConfig` moves the values into their sections (`move_into_sections`). Each bound is declared
  once, as the annotated types below, for the new key and its old name alike.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ..runner_defaults import EPISODE_TIMEOUT_S, ERROR_REWARD, MAX_CONCURRENCY
from .schema import (
    MAX_ABS_REWARD,
    MAX_BATCH_SIZE,
    MAX_EPISODE_TIMEOUT_S,
    MAX_EPOCHS,
    MAX_LEARNING_RATE,
    MAX_RAY_CPUS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TASKS,
    OPPONENT_ARG,
    ConfigError,
    ConfigRecord,
    WorkflowArgs,
)
from .schema import MAX_CONCURRENCY as CONCURRENCY_LIMIT

if TYPE_CHECKING:
    from ..algorithms import CollapseResponse, EntropySteering

log = logging.getLogger(__name__)


class DatasetConfig(ConfigRecord):
    """Where tasks come from and how they are iterated."""

    path: str | None = None
    """A .jsonl/.json/.csv/.parquet file, or a dataset directory as Hugging Face `datasets` lays one out locally
    (per-split files or folders, shards, a dataset card's configs, a `save_to_disk` folder), read without that
    package."""
    name: str | None = None
    """Subset (config) name: a config of the directory's dataset card, else the subdirectory of that name."""
    split: str = "train"
    """Which split to read: the files or folder of that split ('dev' finds 'validation', 'eval' 'test', as in
    `datasets`), a saved DatasetDict's split, or a JSON file's top-level key."""
    tasks: list[dict[str, Any]] | None = None
    """The tasks as an in-memory list, instead of `path`; exactly one of the two is given."""
    total_epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS)
    """Passes over the tasks when `total_steps` is not set."""
    total_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    """Exact number of training steps; when set it replaces `total_epochs` (epochs repeat as needed)."""
    shuffle: bool = True
    """Shuffle the task order every epoch (deterministically, from `seed` and the epoch number)."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed of the per-epoch shuffle and of the eval hold-out split."""
    eval_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Fraction of the tasks held out for evaluation when no eval dataset is configured."""
    workflow_args: dict[str, Any] = Field(default_factory=dict)
    """Extra arguments for the workflow, merged into every task's `workflow_args` (task values win)."""
    limit: int | None = Field(default=None, ge=1, le=MAX_TASKS)
    """Use only the first `limit` tasks (before shuffling): quick experiments on a large file."""

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        if (self.path is None) == (self.tasks is None):
            raise ValueError("give exactly one of `path` (a file or directory) or `tasks` (a list of dicts)")
        return self


MAX_SNAPSHOTS = 64
SNAPSHOT_PREFIX = "snapshot-"
"""Snapshot opponents are named snapshot-<step>, the optimizer steps their weights had taken."""


class LeagueConfig(ConfigRecord):
    """An opponent pool for self-play that keeps learning: snapshots, scripted and frozen opponents, drawn per
    episode."""

    learner: str | None = None
    """The trainable model whose snapshots join the pool and whose games are counted; None: the only trainable model."""
    snapshot_every_steps: int = Field(default=5, ge=0, le=1_000_000)
    """Add a snapshot of the learner at the start of every N-th step (step 0 included); 0 adds none."""
    max_snapshots: int = Field(default=4, ge=1, le=MAX_SNAPSHOTS)
    """Most snapshots in the pool; past it one is evicted by `eviction` (each is a LoRA copy on the engine)."""
    eviction: Literal["oldest", "weakest"] = "oldest"
    """Which snapshot leaves a full pool: 'oldest' (first in, first out) or 'weakest' (the one the policy beats most,
    lowest pfsp weight; ties to the oldest). The newest snapshot never leaves."""
    scripted: dict[str, str] = Field(default_factory=dict)
    """Scripted opponents: name -> import path ('pkg.module:function') of `policy(messages, rng) -> reply`."""
    models: list[str] = Field(default_factory=list)
    """Frozen opponents: names of `auxiliary_models` (the base model, an endpoint, a saved adapter)."""
    sampling: Literal["pfsp", "uniform", "latest"] = "pfsp"
    """How an episode's opponent is drawn: 'pfsp' (weight = failure_rate ** pfsp_power, failure = loss or draw),
    'uniform', or 'latest' (the newest snapshot only)."""
    pfsp_power: float = Field(default=2.0, ge=0.0, le=16.0)
    """The exponent of pfsp's weighting: 0 is uniform, larger values focus on the opponents the policy fails against."""
    record_decay: float = Field(default=0.8, gt=0.0, le=1.0)
    """Every step each opponent's win/draw/loss counts are multiplied by this, so its record follows the changing
    policy; 1 keeps the whole history."""
    draw_per: Literal["episode", "group"] = "episode"
    """'episode': every episode of a GRPO group draws its own opponent, so even a deterministic policy meets different
    outcomes within a group; 'group': one opponent per task, the group's episodes differ only by sampling."""
    baseline_per_opponent: bool = False
    """Compare a game only with the games of its group against the same opponent (the episode's `baseline_group`; all
    snapshots count as one opponent, `snapshot-*`), so with `draw_per: episode` a game against a strong opponent is
    measured against others against it, not against the group's wins over weak ones. A game alone with its opponent
    in its group gets no advantage."""
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    """Seed of the draws (and of the scripted opponents' randomness); with the step it makes a run's draws
    reproducible."""

    @model_validator(mode="after")
    def _pool(self) -> LeagueConfig:
        if not self.snapshot_every_steps and not self.scripted and not self.models:
            raise ValueError("league: the pool is empty; set snapshot_every_steps, scripted or models")
        if self.sampling == "latest" and not self.snapshot_every_steps:
            raise ValueError("league.sampling: 'latest' draws the newest snapshot; set snapshot_every_steps above 0")
        names = [*self.scripted, *self.models]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"league: opponent names {repeated} appear twice; each opponent needs one name")
        for name in names:
            if name.startswith(SNAPSHOT_PREFIX):
                raise ValueError(
                    f"league: opponent name {name!r} starts with {SNAPSHOT_PREFIX!r}, which names the snapshots"
                )
        return self  # the scripted opponents' import paths are checked when the run is built (`check_names`)

    def check_fits(self, trainable: Collection[str], auxiliary: Collection[str], runner_backend: str) -> None:
        """The league against the job around it (`TuneConfig`): its learner trains, its frozen models are auxiliary
        ones, its scripted opponents are not, and its episodes run in this process; a ValueError otherwise."""
        if self.learner is None and len(trainable) > 1:
            raise ValueError(
                f"league.learner: several models train ({sorted(trainable)}); name the one whose snapshots "
                "join the pool"
            )
        if self.learner is not None and self.learner not in trainable:
            raise ValueError(
                f"league.learner: no trainable model {self.learner!r}; trainable models are {sorted(trainable)}"
            )
        for name in self.models:
            if name not in auxiliary:
                raise ValueError(f"league.models: {name!r} is not in auxiliary_models ({sorted(auxiliary)})")
        shared = sorted(set(self.scripted) & set(auxiliary))
        if shared:
            raise ValueError(
                f"league.scripted: {shared} are also auxiliary models; a scripted opponent needs a name of its own"
            )
        if runner_backend != "local":
            raise ValueError("league: its opponents are served in this process; use runner.backend 'local'")

    def check_record(self, record: type[WorkflowArgs]) -> None:
        """The league against the workflow: its arguments record has the field each episode's opponent comes in."""
        if OPPONENT_ARG not in record.model_fields:
            raise ConfigError(
                f"league: the league hands each episode its opponent as workflow_args.{OPPONENT_ARG}, "
                f"but the workflow's {record.__name__} has no field {OPPONENT_ARG!r}; add `{OPPONENT_ARG}: str`"
            )


class ValidationConfig(ConfigRecord):
    """Keep the adapter that plays the validation tasks best, as `best` beside `final`."""

    dataset: DatasetConfig
    """The validation tasks (e.g. training tasks with other `workflow_args`, `limit` to cap each validation's cost);
    never the held-out ones, whose number the choice would bias."""
    every_steps: int = Field(default=5, ge=1, le=MAX_STEPS)
    """Validate after every N-th step (and after the last): each validation plays every validation task once."""
    from_step: int = Field(default=0, ge=0, le=MAX_STEPS)
    """The fewest steps a candidate has taken (0: the untrained weights compete too); later starts save the
    validations of weights that are rarely the best."""
    metric: str = "reward/mean"
    """The evaluation metric that chooses, as `evaluation.json` names it ('reward/mean', 'workflow/<name>', ...)."""
    mode: Literal["max", "min"] = "max"
    """Whether a higher or a lower mean of `metric` is better; a tie keeps the earlier adapter."""

    def due(self, steps: int, total_steps: int) -> bool:
        """Whether the weights after `steps` steps of a `total_steps` run are a candidate."""
        return steps >= self.from_step and (steps % self.every_steps == 0 or steps == total_steps)


class WarmStartConfig(ConfigRecord):
    """Cross-entropy on the replies of chat examples, `steps` optimizer steps, before the run's first RL step."""

    dataset: DatasetConfig
    """The examples, one per row: `messages` (a chat) ending in the assistant reply to learn, and an optional
    `weight` (default 1) that scales its tokens' loss (e.g. 1/k for each of k equally right replies)."""
    steps: int = Field(ge=1, le=MAX_STEPS)
    """Optimizer steps, each on the next `batch_size` examples, as training steps draw tasks (`TaskStream`): the
    dataset's order, reshuffled every pass from `dataset.seed` + the pass when `dataset.shuffle`; a pass's last batch
    may be smaller."""
    batch_size: int = Field(default=16, ge=1, le=MAX_BATCH_SIZE)
    """Examples per step."""
    learning_rate: float = Field(default=1e-3, gt=0.0, le=MAX_LEARNING_RATE)
    """Adam's step size for these steps (Tinker's Adam defaults otherwise, no gradient clipping); RL then starts a
    fresh optimizer at `algorithm`'s settings."""
    model: str | None = None
    """The trainable model it teaches; None: the only one (required when several train)."""

    def model_key(self, trainable: list[str]) -> str:
        """The trainable model it teaches, among `trainable`."""
        if self.model is not None:
            if self.model not in trainable:
                raise ValueError(
                    f"warm_start.model: no trainable model {self.model!r}; trainable models are {sorted(trainable)}"
                )
            return self.model
        if len(trainable) > 1:
            raise ValueError(f"warm_start.model: several models train ({sorted(trainable)}); name the one it teaches")
        return trainable[0]


EXPLORATION_METRIC = "collapse/exploration"
"""The metric that logs the exploration the next rollout uses; a resumed run reads the last one back."""


class CollapseResponseConfig(ConfigRecord):
    """Widen the training rollouts' exploration while groups tie, narrow it back once they differ."""

    zero_variance_bound: float = Field(default=0.5, ge=0.0, lt=1.0)
    """A step whose share of tied groups (`advantage/zero_variance_fraction`) is above this counts as tied."""
    patience: int = Field(default=2, ge=1, le=1000)
    """Tied steps in a row before the response acts: one tied step is noise, two a trend."""
    factor: float = Field(default=2.0, gt=1.0, le=100.0)
    """How much one response multiplies the exploration (and one untied step divides it, down to the configured)."""
    min_exploration: float = Field(default=0.1, gt=0.0, lt=1.0)
    """The exploration the first response sets at least (a configured 0 cannot be multiplied up)."""
    max_exploration: float = Field(default=0.5, gt=0.0, lt=1.0)
    """The most exploration the response sets: half the draws still follow the policy."""

    def response(self, base: float, previous_metrics: list[dict]) -> CollapseResponse:
        """The response of a run configured with exploration `base` whose earlier steps logged `previous_metrics`."""
        from ..algorithms import CollapseResponse  # here: reading a config must not import torch

        logged = [record[EXPLORATION_METRIC] for record in previous_metrics if EXPLORATION_METRIC in record]
        exploration = logged[-1] if logged else base
        high = max(self.max_exploration, base)
        return CollapseResponse(
            base, self.zero_variance_bound, self.patience, self.factor, self.min_exploration, high, exploration
        )


COEF_METRIC = "optim/entropy_coef"
"""The metric that logs each update's coefficient; a resumed run reads the last one back."""


class EntropyTargetConfig(ConfigRecord):
    """An entropy bonus steered each step towards `target` instead of one fixed `loss_fn_config.entropy_coef`."""

    target: float = Field(gt=0.0, le=20.0)
    """Mean entropy per sampled token (nats, the step's `collapse/entropy`) to hold the policy at."""
    rate: float = Field(default=3.0, gt=0.0, le=100.0)
    """How far log(coefficient) moves per nat the step's entropy misses the target (3: a step 0.1 nat below it
    raises the coefficient by 35 %, one 0.1 nat above lowers it by 26 %)."""
    initial_coef: float = Field(default=0.1, gt=0.0, le=100.0)
    """The coefficient before the first step."""
    min_coef: float = Field(default=0.01, gt=0.0, le=100.0)
    """The smallest coefficient (never 0, and not far below where it acts: it comes back within a few steps once
    the policy sharpens past the target; from 0.01 to 0.1 in 8 steps 0.1 nat below it)."""
    max_coef: float = Field(default=1.0, gt=0.0, le=100.0)
    """The largest coefficient: bounds how hard the bonus pushes against the policy gradient."""

    @model_validator(mode="after")
    def _ordered_bounds(self) -> EntropyTargetConfig:
        if not self.min_coef <= self.initial_coef <= self.max_coef:
            raise ValueError(
                f"entropy_target: needs min_coef <= initial_coef <= max_coef, got {self.min_coef:g}, "
                f"{self.initial_coef:g}, {self.max_coef:g}"
            )
        return self

    def steering(self, previous_metrics: list[dict]) -> EntropySteering:
        """The steering of a run whose earlier steps logged `previous_metrics` (none for a new run)."""
        from ..algorithms import (
            EntropySteering,  # here: reading a config must not import torch (sparring.algorithms does)
        )

        logged = [record[COEF_METRIC] for record in previous_metrics if COEF_METRIC in record]
        coef = logged[-1] if logged else self.initial_coef
        return EntropySteering(self.target, self.rate, self.min_coef, self.max_coef, coef)


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


class LoggingConfig(ConfigRecord):
    """Where metrics and rollouts go."""

    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project; None disables wandb."""
    console: bool = True
    """Print a progress line per step."""
    save_rollouts: bool = True
    """Dump every episode's tokens, masks, logprobs and advantages for inspection."""


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
