"""The configuration of a training job: the validated records a job YAML file holds.

One `TuneConfig` describes a whole run -- the workflow to execute, the models (trainable, several trainable, frozen
auxiliaries), the RL algorithm, the datasets, logging -- and is exactly what a job YAML file holds, so `tune(...)`,
the `Job` object and `sparring train config.yaml` all meet here. Its parts (`DatasetConfig`, `TunerModelConfig`,
`AlgorithmConfig`) take their names from the AgentScope tuner so code written for it reads the same.

Every config validates on construction (`schema.ConfigRecord`: a bad value raises `ConfigError`, one line naming
the dotted field path), and every number has an upper bound (the `MAX_*` constants of `schema.py`). The sections
beside the algorithm -- datasets, league, validation, warm start, logging, and the run's mechanics (where episodes
run, when to evaluate, when to checkpoint) -- are `sections.py`; the mechanics' old keys in `algorithm:` are still
read, for one release. The runner's defaults are `runner_defaults.py`'s, which `RunnerSettings` takes too.

Reading a config imports no user code, no torch and no registry: the names a config can only check against what they
name -- the workflow's and baselines' import paths, `algorithm_type`, `loss_fn` and its `loss_fn_config` keys, a model's
torch device -- are checked (and a loss or estimator given by import path registered) by `config_file.check_names` when
the run is built, before any data or model loads, so the command line reports a malformed file in a fraction of a
second. Reading the YAML file is `config_file.py`; turning a config into a runnable run is `resolve.py`.

What a config does with its own records: `dump_config` writes it back as YAML, every field included, so a run folder
holds the exact file that reproduces it (and a `Job` saves one); `check_config_args` checks its `workflow_args` against
the workflow's record; `check_models` finds every local model it names (a catalogue name or a path, a device this
machine has, an adapter folder) without loading anything, so `resolve_run` reports a typo in a second, with the field it
is about, before anything is written or loaded.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..runner_defaults import GROUP_SIZE
from ..runner_defaults import RUNNER_DEFAULTS as RUNNER_DEFAULTS
from .schema import (
    MAX_BATCH_SIZE,
    MAX_COEFFICIENT,
    MAX_CONTEXT_TOKENS,
    MAX_EPISODES_PER_STEP,
    MAX_GRAD_CLIP_NORM,
    MAX_GROUP_SIZE,
    MAX_LEARNING_RATE,
    MAX_LORA_RANK,
    MAX_NEW_TOKENS,
    MAX_SEED,
    MAX_STALENESS,
    MAX_STEPS,
    MAX_TEMPERATURE,
    MAX_VOCABULARY,
    ConfigError,
    ConfigRecord,
    WorkflowArgs,
    check_workflow_args,
    is_import_path,
)
from .sections import (
    CheckpointsConfig,
    CollapseResponseConfig,
    DatasetConfig,
    EntropyTargetConfig,
    EvaluationConfig,
    LeagueConfig,
    LoggingConfig,
    MovedAlgorithmKeys,
    RunnerConfig,
    ValidationConfig,
    WarmStartConfig,
    move_into_sections,
)

if TYPE_CHECKING:
    from ..types import AdamParams


DEFAULT_MODEL_NAME = "policy"
_MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TunerModelConfig(ConfigRecord):
    """One model: a local base model (+ LoRA adapter), a model on a Tinker-protocol service, or a frozen
    OpenAI-compatible endpoint."""

    model_path: str = "smollm2-135m-instruct"
    """Catalogue name, HF model directory or .gguf file; for a remote endpoint, the model name it serves."""
    max_model_len: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Longest prompt + completion in tokens; None means the model's own context length."""
    temperature: float = Field(default=1.0, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature used by the agents; 0 means greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(default=-1, ge=-1, le=MAX_VOCABULARY)
    """Keep only the k most likely tokens; -1 for no limit."""
    max_tokens: int = Field(default=128, ge=1, le=MAX_NEW_TOKENS)
    """Most new tokens per model call."""
    lora_rank: int = Field(default=16, ge=1, le=MAX_LORA_RANK)
    """Rank of the LoRA adapter that is trained."""
    device: str = "cpu"
    """torch device that runs the model ('cpu', 'cuda', 'cuda:1')."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Weights dtype; None means float32 on CPU and bfloat16 on CUDA."""
    prefix_cache_mib: float = Field(default=1024, ge=0, le=1_048_576)
    """Budget of the engine's prefix KV cache kept across calls (MiB); 0 = off (on/off measured in
    benchmarks/README.md)."""
    backend: Literal["local", "tinker"] = "local"
    """Where the model runs: 'local' (an engine in this process) or 'tinker' (any Tinker-protocol service, via the
    tinker SDK)."""
    base_url: str | None = None
    """backend 'local': URL of a frozen OpenAI-compatible endpoint (never trained); backend 'tinker': the service's URL
    (default: the TINKER_BASE_URL environment variable)."""
    api_key: str | None = None
    """API key for `base_url`; with backend 'tinker' the default is the TINKER_API_KEY environment variable."""
    trainable: bool = True
    """Whether this model learns; lets `models` mix trainable and frozen entries (auxiliary models are always
    frozen)."""
    adapter_path: str | None = None
    """A saved PEFT adapter to start training from (or to serve, when frozen)."""
    snapshot_of: str | None = None
    """Auxiliary models only: a frozen snapshot of the trainable model of this name (an opponent from an earlier
    step); it copies that adapter's LoRA weights, never the base weights, and unset fields are taken from it."""
    snapshot_interval_steps: int = Field(default=0, ge=0, le=MAX_STEPS)
    """Retake the snapshot every N training steps; 0 keeps the one taken when the run starts."""

    @field_validator("max_tokens")
    @classmethod
    def _room_for_the_prompt(cls, value: int, info: ValidationInfo) -> int:
        context = info.data.get("max_model_len")
        if context is not None and value >= context:
            raise ValueError(
                f"{value} new tokens leave no room for the prompt in max_model_len {context}; use fewer than {context}"
            )
        return value

    @model_validator(mode="after")
    def _backend_settings(self) -> TunerModelConfig:
        if self.backend != "tinker":
            return self
        if not (self.base_url or os.environ.get("TINKER_BASE_URL")):
            raise ValueError(
                "base_url: backend 'tinker' needs the service's URL; set base_url or the TINKER_BASE_URL "
                "environment variable"
            )
        if self.device != "cpu" or self.dtype is not None:
            raise ValueError(
                "device/dtype: with backend 'tinker' the service picks the device and dtype; leave them unset"
            )
        if self.adapter_path is not None and not self.adapter_path.startswith("tinker://"):
            raise ValueError(
                "adapter_path: backend 'tinker' starts from weights saved on the service (a tinker:// "
                f"path), got {self.adapter_path!r}"
            )
        return self

    @property
    def is_remote(self) -> bool:
        """A frozen OpenAI-compatible endpoint (backend 'local' with a base_url)."""
        return self.backend == "local" and self.base_url is not None

    def service_url(self) -> str | None:
        """The Tinker-protocol service of a backend 'tinker' model (base_url, else TINKER_BASE_URL); None for
        'local'."""
        return (self.base_url or os.environ.get("TINKER_BASE_URL")) if self.backend == "tinker" else None

    def service_api_key(self) -> str | None:
        """The API key for service_url (api_key, else TINKER_API_KEY)."""
        return self.api_key or os.environ.get("TINKER_API_KEY")

    def sampling_params(self) -> dict[str, Any]:
        """The sampling settings, as keyword arguments for `sparring.types.SamplingParams`."""
        return self.model_dump(include={"temperature", "top_p", "top_k", "max_tokens"})


class AlgorithmConfig(ConfigRecord, MovedAlgorithmKeys):
    """The RL algorithm: advantage estimation, loss, optimizer and rollout budget."""

    algorithm_type: str = "multi_step_grpo"
    """Advantage estimator: a name in `sparring.algorithms.ADVANTAGE_ESTIMATORS` (multi_step_grpo credits every turn
    of an episode with its group-relative advantage), or the import path of a function
    `estimator(rewards_G, *, normalize_by_std) -> advantages_G` (see `algorithms.register_estimator`)."""
    learning_rate: float = Field(default=3e-4, ge=0.0, le=MAX_LEARNING_RATE)
    """AdamW step size for the LoRA weights (the peak, under a schedule); 3e-4 was chosen on the learning suite
    (docs/learning-suite.md): 1e-4 let noise turn the policy deterministic before context mattered."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How the step size moves over the run's steps: constant, or decaying from `learning_rate` at the first step
    towards 0 after the last, linearly or along a half cosine, so late steps move a trained policy less."""
    group_size: int = Field(default=GROUP_SIZE, ge=1, le=MAX_GROUP_SIZE)
    """Episodes run per task; advantages compare episodes within a group."""
    batch_size: int = Field(default=16, ge=1, le=MAX_BATCH_SIZE)
    """Tasks per training step. 16 tasks x 4 episodes, chosen on the learning suite over 4 x 8: an update that sees
    many prompts moves the reply given the prompt, one that sees few moves the reply to every prompt."""
    loss_fn: str = "ppo"
    """Policy-gradient loss, as the Tinker API names it (one of `engine.losses.advantage_weighted_losses()`), or the
    import path of a function `loss(target_logprobs_M, inputs, config) -> loss_M` or a `LossSpec` (see
    `engine.losses.register_loss`); a local engine runs it, a Tinker-protocol service takes built-in names only."""
    loss_fn_config: dict[str, float] = Field(default_factory=dict)
    """Loss settings, e.g. clip_low_threshold / clip_high_threshold for ppo and cispo."""
    entropy_target: EntropyTargetConfig | None = None
    """An entropy bonus whose coefficient is steered each step towards a target entropy (`EntropyTargetConfig`),
    instead of a fixed `loss_fn_config.entropy_coef`; None: no steering."""
    kl_coef: float = Field(default=0.0, ge=0.0, le=MAX_COEFFICIENT)
    """Weight of a KL penalty towards the base model; 0 disables it (and its extra forward pass)."""
    adam_beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    """AdamW first-moment decay."""
    adam_beta2: float = Field(default=0.95, ge=0.0, lt=1.0)
    """AdamW second-moment decay."""
    weight_decay: float = Field(default=0.0, ge=0.0, le=MAX_COEFFICIENT)
    """AdamW decoupled weight decay."""
    grad_clip_norm: float = Field(default=1.0, ge=0.0, le=MAX_GRAD_CLIP_NORM)
    """Clip the global gradient norm to this value; 0 disables clipping."""
    normalize_advantages_by_std: bool = True
    """Divide group-relative advantages by the group's reward std (GRPO); off gives Dr. GRPO-style advantages."""
    drop_zero_variance_groups: bool = True
    """Skip groups whose episodes all got the same reward: they carry no learning signal."""
    per_role_advantages: bool = True
    """Compute advantages separately per agent role when agents receive different rewards."""
    turn_reward_discount: float = Field(default=1.0, ge=0.0, le=1.0)
    """With per-turn credit (`turn_rewards`): the weight of a turn reward earned k calls later in a call's return,
    `turn_reward_discount` ** k; 0 credits each call with its own turn reward only (plus the episode reward)."""
    rollout_temperature_floor: float = Field(default=0.0, ge=0.0, le=MAX_TEMPERATURE)
    """Training rollouts sample the trainable models at no lower temperature than this (a call asking for less, greedy
    included, is raised to it); evaluations keep the configured temperature. A lever against a policy turning
    deterministic, whose groups then tie and train nothing; 0 leaves every call as asked."""
    exploration: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Training rollouts draw this share of every constrained token (a `choices=`, regex or schema reply) uniformly over
    the allowed tokens, so a policy that turned deterministic still tries every reply and its groups keep differing;
    the update weights each episode by p / q (`algorithms.exploration`), so it stays the policy's own gradient.
    Evaluations never explore; free-text calls are unaffected; 0 draws from the policy alone."""
    importance_weight_cap: float = Field(default=10.0, ge=1.0, le=MAX_COEFFICIENT)
    """An episode drawn wider than the policy (exploration, a raised temperature floor) weighs p / q, truncated at
    this value: bounded variance for a little bias where a raised temperature makes p / q large."""
    collapse_response: CollapseResponseConfig | None = Field(default_factory=CollapseResponseConfig)
    """When groups keep tying, widen the next rollouts' exploration (and narrow it back once they differ), logged as
    `collapse/exploration` (`CollapseResponseConfig`); None: only the collapse warning."""
    max_staleness: int = Field(default=0, ge=0, le=MAX_STALENESS)
    """Asynchronous off-policy training: the rollouts of step k sample the weights of step k - N (a frozen copy) and
    run while earlier steps train, so at most N optimizer steps lie between the weights that sampled a token and the
    weights that train on it; 0 is the on-policy schedule (each rollout waits for the weights of the step before).
    Evaluation and validation steps drain the pipeline; a league, validation and step hooks work at any value."""
    stop_after_failed_steps: int = Field(default=3, ge=0, le=MAX_STEPS)
    """Stop the run (after saving a checkpoint) when every episode failed in this many steps in a row; 0 never stops."""
    allow_nothing_trained: bool = False
    """A deliberate dry run: steps that train no token are not warned about, and a run that trained none ends normally
    (with a "final" adapter equal to the initial one) instead of raising `NothingTrainedError`."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed for sampling and any other randomness of the run."""

    @field_validator("batch_size")
    @classmethod
    def _episodes_per_step(cls, value: int, info: ValidationInfo) -> int:
        group_size = info.data.get("group_size", 1)  # absent when group_size itself failed validation
        if group_size * value > MAX_EPISODES_PER_STEP:
            raise ValueError(
                f"group_size {group_size} x batch_size {value} = {group_size * value} episodes per step, "
                f"more than {MAX_EPISODES_PER_STEP}; lower one of them"
            )
        return value

    @field_validator("entropy_target")
    @classmethod
    def _one_entropy_coefficient(
        cls, value: EntropyTargetConfig | None, info: ValidationInfo
    ) -> EntropyTargetConfig | None:
        if value is None:
            return value
        if "entropy_coef" in info.data.get("loss_fn_config", {}):
            raise ValueError(
                "entropy_target steers the entropy bonus's coefficient; remove loss_fn_config.entropy_coef "
                "(the first coefficient is entropy_target.initial_coef)"
            )
        return value

    def adam_params(self, step: int = 0, total_steps: int = 1) -> AdamParams:
        """The optimizer settings as the `optim_step` argument of step `step` (0-based) of `total_steps`."""
        from ..types import AdamParams

        return AdamParams(
            learning_rate=self.learning_rate * lr_multiplier(self.lr_schedule, step, total_steps),
            beta1=self.adam_beta1,
            beta2=self.adam_beta2,
            weight_decay=self.weight_decay,
            grad_clip_norm=self.grad_clip_norm,
        )


def lr_multiplier(schedule: str, step: int, total_steps: int) -> float:
    """The share of the peak step size that step `step` (0-based) of `total_steps` trains with under `schedule`."""
    done = min(step, total_steps) / total_steps
    if schedule == "linear":
        return 1.0 - done
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return 1.0


class TuneConfig(ConfigRecord):
    """A whole training job; what a job YAML file holds."""

    workflow: str | None = None
    """Import path ('package.module:attr' or 'path/to/file.py:attr') of the workflow function or Workflow class."""
    judge: str | None = None
    """Import path of the judge function that scores episodes; None when the workflow returns rewards."""
    model: TunerModelConfig = Field(default_factory=TunerModelConfig)
    """The trainable model, when only one model learns."""
    models: dict[str, TunerModelConfig] | None = None
    """Several models keyed by name (e.g. two debaters); when given it replaces `model`."""
    auxiliary_models: dict[str, TunerModelConfig] = Field(default_factory=dict)
    """Frozen models by name, handed to the workflow for the agents that do not learn."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """The RL algorithm and its hyperparameters."""
    train_dataset: DatasetConfig | None = None
    """The training tasks."""
    eval_dataset: DatasetConfig | None = None
    """Held-out tasks for evaluation; None holds out `train_dataset.eval_fraction` instead."""
    run_dir: str | None = None
    """Directory for checkpoints, metrics and rollouts; None means runs/<timestamp>."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Metric and rollout logging."""
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    """Where and how episodes run: in this process or on Ray, how many at once, their timeout and error reward."""
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """When the held-out tasks are evaluated, and how many of them."""
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    """When checkpoints are written, and how many are kept."""
    baselines: dict[str, str] = Field(default_factory=dict)
    """Scripted policies evaluated beside the model on the same held-out tasks: name -> import path of
    `policy(messages, rng) -> reply` (e.g. 'sparring.envs.guess_number:binary_search'); never trained."""
    league: LeagueConfig | None = None
    """An opponent pool (policy snapshots, scripted and frozen opponents) from which every training episode draws its
    opponent (`LeagueConfig`, `sections.py`; docs/league.md); None: the workflow picks its own opponents."""
    validation: ValidationConfig | None = None
    """Validation tasks on which the run chooses the adapter it keeps as `best` (`ValidationConfig`); None: no
    choice."""
    warm_start: WarmStartConfig | None = None
    """Supervised steps on worked examples (chats ending in the reply to learn) before the first RL step
    (`WarmStartConfig`); None: RL from the first step."""
    step_hooks: list[str] = Field(default_factory=list)
    """Import paths of `StepHook` classes (built with no arguments) whose methods run before every step's rollout
    and after its update (`StepHook`, `step.py`); hooks built in Python are passed to `tune(step_hooks=...)` instead."""

    @model_validator(mode="after")
    def _moved_keys_and_baseline_names(self) -> TuneConfig:
        sections = {"runner": self.runner, "evaluation": self.evaluation, "checkpoints": self.checkpoints}
        for name, record in move_into_sections(self.algorithm, sections).items():
            setattr(self, name, record)
        if self.algorithm.moved_values():
            self.algorithm = self.algorithm.without_moved_keys()  # the values live in the sections now
        for name in self.baselines:
            if not _MODEL_NAME_PATTERN.match(name) or name in ("untrained", "trained"):
                raise ValueError(
                    f"baselines.{name}: a baseline name may use letters, digits, '_', '-' and '.' only, "
                    "and is not 'untrained' or 'trained' (the model's columns)"
                )
        return self

    @model_validator(mode="after")
    def _consistent_parts(self) -> TuneConfig:
        if self.eval_dataset is not None and self.train_dataset is not None and self.train_dataset.eval_fraction > 0:
            raise ValueError(
                "train_dataset.eval_fraction: an eval_dataset is given, so no training tasks are held out; set it to 0"
            )
        if self.models is not None:
            if not self.models:
                raise ValueError("models: give at least one model, or leave `models` out and use `model`")
            if not any(config.trainable for config in self.models.values()):
                raise ValueError("models: no model has trainable=true; nothing would be trained")
            shared = sorted(set(self.models) & set(self.auxiliary_models))
            if shared:
                raise ValueError(f"models and auxiliary_models share the names {shared}; each model needs one name")
        for name, config in (self.models or {"model": self.model}).items():
            if config.snapshot_of is not None or config.snapshot_interval_steps:
                path = f"models.{name}" if self.models is not None else "model"
                raise ValueError(f"{path}.snapshot_of: only auxiliary models can be snapshots of a trainable model")
        for name, config in self.auxiliary_models.items():
            self.auxiliary_models[name] = _resolve_snapshot(f"auxiliary_models.{name}", config, self.trainable_models())
        prefix = "models" if self.models is not None else None
        for name, config in self.trainable_models().items():
            path = f"{prefix}.{name}" if prefix else "model"
            if prefix and not _MODEL_NAME_PATTERN.match(name):
                raise ValueError(f"{path}: a model name may use letters, digits, '_', '-' and '.' only")
            if config.is_remote:
                raise ValueError(f"{path}.base_url: a remote endpoint cannot be trained; list it in auxiliary_models")
        if self.league is not None:
            self.league.check_fits(self.trainable_models(), self.auxiliary_models, self.runner.backend)
        if self.warm_start is not None:
            self.warm_start.model_key(list(self.trainable_models()))
        remote = [name for name, config in self.trainable_models().items() if config.backend == "tinker"]
        if remote and is_import_path(self.algorithm.loss_fn):
            raise ValueError(
                f"algorithm.loss_fn: {self.algorithm.loss_fn!r} is imported in this process, but {remote} train on a "
                f"Tinker-protocol service (backend 'tinker'), which runs the loss names it has registered only; use a "
                f"built-in loss or backend 'local'"
            )
        return self

    def league_learner(self) -> str:
        """The trainable model the league snapshots (`league.learner`, else the only trainable one)."""
        if self.league is None:
            raise ValueError("no league configured")
        return self.league.learner or next(iter(self.trainable_models()))

    def trainable_models(self) -> dict[str, TunerModelConfig]:
        """The models that learn, by name; a lone `model` is named DEFAULT_MODEL_NAME."""
        if self.models is None:
            return {DEFAULT_MODEL_NAME: self.model}
        return {name: config for name, config in self.models.items() if config.trainable}


# A snapshot lives on its source's engine: these must match it, and are taken from it when not set.
_SNAPSHOT_SHARED = ("model_path", "device", "dtype", "lora_rank", "max_model_len", "backend")
_SNAPSHOT_INHERITED = ("temperature", "top_p", "top_k", "max_tokens")


def _resolve_snapshot(path: str, config: TunerModelConfig, trainable: dict[str, TunerModelConfig]) -> TunerModelConfig:
    """`config` with the fields it does not set taken from the trainable model it snapshots (unchanged if it is no
    snapshot)."""
    if config.snapshot_of is None:
        if config.snapshot_interval_steps:
            raise ValueError(
                f"{path}.snapshot_interval_steps: only a snapshot (snapshot_of: <trainable model>) is refreshed"
            )
        return config
    source = trainable.get(config.snapshot_of)
    if source is None:
        raise ValueError(
            f"{path}.snapshot_of: no trainable model {config.snapshot_of!r}; trainable models are {sorted(trainable)}"
        )
    for field_name in ("base_url", "adapter_path"):
        if getattr(config, field_name) is not None:
            raise ValueError(
                f"{path}.{field_name}: a snapshot copies the weights of {config.snapshot_of!r}; remove {field_name}"
            )
    for field_name in _SNAPSHOT_SHARED:
        if field_name in config.model_fields_set and getattr(config, field_name) != getattr(source, field_name):
            raise ValueError(
                f"{path}.{field_name}: a snapshot shares the base weights of {config.snapshot_of!r}, "
                f"whose {field_name} is {getattr(source, field_name)!r} (got {getattr(config, field_name)!r})"
            )
    taken = {
        name: getattr(source, name)
        for name in (*_SNAPSHOT_SHARED, *_SNAPSHOT_INHERITED)
        if name not in config.model_fields_set
    }
    return config.model_copy(update={**taken, "trainable": False})


def dump_config(config: TuneConfig, path: str | os.PathLike[str]) -> Path:
    """Write `config` as YAML (every field, defaults included, for manual editing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path


def check_models(config: TuneConfig) -> None:
    """Every local model the run uses is found (catalogue name or path), its device is on this machine, its adapter
    is a folder; nothing is loaded. A failure is a ConfigError naming the field (``models.pro.model_path: ...``)."""
    from ..models import ModelNotInstalledError, UnknownModelError, parse_device, resolve_model  # imports torch

    used = {
        ("model" if config.models is None else f"models.{name}"): model
        for name, model in config.trainable_models().items()
    }
    used.update({f"auxiliary_models.{name}": model for name, model in config.auxiliary_models.items()})
    for field, model in used.items():
        if model.backend != "local" or model.is_remote or model.snapshot_of is not None:
            continue  # a service's models, and a snapshot's source, are checked where they live
        try:
            resolve_model(model.model_path)
        except (UnknownModelError, ModelNotInstalledError) as error:
            raise ConfigError(f"{field}.model_path: {error}") from None
        try:
            parse_device(model.device)
        except ValueError as error:  # its message starts with "device: "
            raise ConfigError(f"{field}.{error}") from None
        if model.adapter_path is not None and not Path(model.adapter_path).is_dir():
            raise ConfigError(
                f"{field}.adapter_path: no folder {model.adapter_path!r}; give a saved adapter (a run's "
                "sampler_weights/... or checkpoints/... folder)"
            )


def check_config_args(config: TuneConfig, record: type[WorkflowArgs]) -> None:
    """The config's `workflow_args` (every dataset's) fit `record`, and a league's drawn opponent has its field."""
    sections = {"train_dataset": config.train_dataset, "eval_dataset": config.eval_dataset}
    if config.validation is not None:
        sections["validation.dataset"] = config.validation.dataset
    for where, dataset in sections.items():
        if dataset is not None:
            check_workflow_args(record, dataset.workflow_args, f"{where}.workflow_args")
    if config.league is not None:
        config.league.check_record(record)
