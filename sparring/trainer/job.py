"""The entry points that assemble a run in Python: `tune()`, the `Job` object, AgentJet's job arguments.

`tune()` is the AgentScope-shaped entry point, one call from workflow to trained adapter. It takes the reference
tuner's arguments (workflow_func, judge_func, train_dataset, eval_dataset, model, auxiliary_models, algorithm) plus
sparring's `models` (several trainable models at once), `run_dir`, `logging`, the config's sections, `resume`,
`overwrite` and `step_hooks`, builds the same `TuneConfig` that `sparring train config.yaml` reads, and runs it.

`Job` is a training run assembled in Python, saved as YAML, and run. Shaped after AgentJet's job (``Job(model=...,
algorithm=...)``, ``.set_workflow(...)``, ``.set_data(...)``, YAML dump/load, ``.tune()``), a `Job` is a
`TuneConfig` plus the in-process workflow and judge objects. The YAML that `dump_yaml` writes is the file ``sparring
train`` reads, so a job sketched in a notebook can be edited by hand and launched from the command line, and the
other way round. YAML names a workflow by import path, so only importable workflows (functions or classes at the top
level of a module or script) can be saved; a lambda or a function defined inside another function still trains
through `tune()` in the same process, and `dump_yaml` refuses it with an explanation.

AgentJet's spellings are aliases: ``set_data(type="hf"|"jsonl", dataset_path=..., training_split=...,
validation_split=...)``, ``dump_job_as_yaml`` and ``load_job_from_yaml`` (which loads into this job), and its job
arguments (``AgentJetJob(n_gpu=8, backbone="verl", lr=..., ...)``). AgentJet's job takes what to train (group size,
batch, learning rate, LoRA rank, token lengths, where the run goes) beside how its launcher places the work (GPUs per
node, its training backbone, vLLM's memory share, swarm workers). `agentjet_fields` maps the first kind onto the
`TuneConfig` fields a `Job` is built from, and names the second kind in one note, which `Job` logs as one line:
sparring trains in one process on `model.device`, so those settings do not apply here, and a job written for
AgentJet runs with only its import changed. A name that is neither is left to the caller (a `TypeError`, as for any
unexpected keyword).
"""

from __future__ import annotations

import logging as logs
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import AlgorithmConfig, DatasetConfig, LoggingConfig, TuneConfig, TunerModelConfig, dump_config
from .config_file import import_object, importable_path, load_config_file
from .schema import ConfigError
from .sections import CheckpointsConfig, EvaluationConfig, LeagueConfig, RunnerConfig, ValidationConfig, WarmStartConfig

if TYPE_CHECKING:
    from .loop import RunResult
    from .step import StepHook

log = logs.getLogger(__name__)


def tune(
    workflow_func: Callable | type | None = None,
    judge_func: Callable | None = None,
    train_dataset: DatasetConfig | list[dict] | str | None = None,
    model: TunerModelConfig | None = None,
    auxiliary_models: dict[str, TunerModelConfig] | None = None,
    algorithm: AlgorithmConfig | None = None,
    eval_dataset: DatasetConfig | list[dict] | str | None = None,
    *,
    models: dict[str, TunerModelConfig] | None = None,
    run_dir: str | Path | None = None,
    logging: LoggingConfig | None = None,
    league: LeagueConfig | None = None,
    validation: ValidationConfig | None = None,
    warm_start: WarmStartConfig | None = None,
    runner: RunnerConfig | None = None,
    evaluation: EvaluationConfig | None = None,
    checkpoints: CheckpointsConfig | None = None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    step_hooks: Sequence[StepHook] = (),
) -> RunResult:
    """Train the agents of `workflow_func` (a function- or class-style workflow); returns the run's result.

    `resume` continues the run in that folder; `overwrite` replaces a run already in `run_dir` (refused without either);
    `step_hooks` run before every step's rollout and after its update (`StepHook`).
    """
    job = Job(
        model=model or TunerModelConfig(),
        models=models,
        auxiliary_models=auxiliary_models or {},
        algorithm=algorithm or AlgorithmConfig(),
        run_dir=str(run_dir) if run_dir is not None else None,
        logging=logging or LoggingConfig(),
        league=league,
        validation=validation,
        warm_start=warm_start,
        runner=runner,
        evaluation=evaluation,
        checkpoints=checkpoints,
    )
    job.set_workflow(workflow_func, judge=judge_func).set_data(train=train_dataset, eval=eval_dataset)
    return job.tune(resume=resume, overwrite=overwrite, hooks=step_hooks)


DatasetSpec = DatasetConfig | dict[str, Any] | list[dict[str, Any]] | str | os.PathLike[str]
"""A dataset as `set_data` takes it: a config, its fields, the tasks themselves, or a path."""


def _dataset_config(spec: DatasetSpec | None) -> DatasetConfig | dict[str, Any] | None:
    if spec is None or isinstance(spec, (DatasetConfig, dict)):
        return spec
    if isinstance(spec, list):
        return {"tasks": spec}
    if isinstance(spec, (str, os.PathLike)):
        return {"path": os.fspath(spec)}
    raise ConfigError(
        f"a dataset must be a DatasetConfig, a dict of its fields, a list of tasks or a path, not {type(spec).__name__}"
    )


AGENTJET_DATA_TYPES = ("hf", "huggingface", "huggingface_dat_repo", "jsonl", "jsonl_dataset_file")
"""`set_data(type=...)` values: AgentJet's names of a Hugging Face dataset and of a JSONL file, both read locally."""


def _agentjet_data(
    type: str, dataset_path: str | os.PathLike[str], training_split: str, validation_split: str | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The train and eval dataset fields of AgentJet's `set_data`: both splits of a dataset folder, or a file's
    tasks."""
    if type not in AGENTJET_DATA_TYPES:
        raise ConfigError(
            f"set_data: type {type!r} is not one sparring reads; use one of "
            f"{', '.join(AGENTJET_DATA_TYPES)} (a local folder or file)"
        )
    path = os.fspath(dataset_path)
    train = {"path": path, "split": training_split}
    if validation_split is None or not os.path.isdir(path):
        return train, None
    return train, {"path": path, "split": validation_split}


class Job:
    """A training job: its `config` (a TuneConfig) and the workflow and judge it runs."""

    def __init__(
        self,
        *,
        model: TunerModelConfig | dict[str, Any] | str | None = None,
        models: dict[str, TunerModelConfig | dict[str, Any]] | None = None,
        auxiliary_models: dict[str, TunerModelConfig | dict[str, Any]] | None = None,
        algorithm: AlgorithmConfig | dict[str, Any] | str | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        logging: LoggingConfig | dict[str, Any] | str | None = None,
        league: LeagueConfig | dict[str, Any] | None = None,
        validation: ValidationConfig | dict[str, Any] | None = None,
        warm_start: WarmStartConfig | dict[str, Any] | None = None,
        runner: RunnerConfig | dict[str, Any] | None = None,
        evaluation: EvaluationConfig | dict[str, Any] | None = None,
        checkpoints: CheckpointsConfig | dict[str, Any] | None = None,
        **agentjet: Any,
    ) -> None:
        """Build the config; a string `model` is a model path and a string `algorithm` an algorithm type.

        AgentJet's job arguments are accepted too (`n_gpu=8`, `num_repeat`, `lr`, `experiment_dir`, ...; see
        `agentjet_fields`): mapped onto the config where sparring has the setting, else named in one log line.
        """
        unknown = sorted(set(agentjet) - AGENTJET_ARGUMENTS)
        if unknown:
            raise TypeError(
                f"Job() got unexpected keyword arguments {unknown}: neither Job's nor AgentJet's job "
                f"arguments ({sorted(AGENTJET_ARGUMENTS)})"
            )
        if isinstance(logging, str):  # AgentJet's backend name
            agentjet["logging"], logging = logging, None
        fields: dict[str, Any] = {
            "model": {"model_path": model} if isinstance(model, str) else model,
            "models": models,
            "auxiliary_models": auxiliary_models,
            "algorithm": {"algorithm_type": algorithm} if isinstance(algorithm, str) else algorithm,
            "run_dir": os.fspath(run_dir) if run_dir is not None else None,
            "logging": logging,
            "league": league,
            "validation": validation,
            "warm_start": warm_start,
            "runner": runner,
            "evaluation": evaluation,
            "checkpoints": checkpoints,
        }
        note = agentjet_fields(fields, agentjet)
        self.config = TuneConfig(**{name: value for name, value in fields.items() if value is not None})
        if note is not None:
            log.warning("%s", note)
        self._workflow: Callable[..., Any] | type | None = None
        self._judge: Callable[..., Any] | None = None

    @classmethod
    def from_config(cls, config: TuneConfig) -> Job:
        job = cls()
        job.config = config
        return job

    @classmethod
    def load_yaml(cls, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Job:
        """A job from a YAML file (with optional ``section.field=value`` overrides); the workflow is imported when
        it runs."""
        return cls.from_config(load_config_file(path, overrides))

    @property
    def workflow(self) -> Callable[..., Any] | type | None:
        """The workflow object given to `set_workflow`; None for a loaded job (the config names it)."""
        return self._workflow

    @property
    def judge(self) -> Callable[..., Any] | None:
        return self._judge

    def _replace(self, **fields: Any) -> None:
        self.config = TuneConfig(**{**dict(self.config), **fields})

    def set_workflow(
        self, workflow: Callable[..., Any] | type | str, judge: Callable[..., Any] | str | None = None
    ) -> Job:
        """Set the workflow (function, Workflow class or import path) and the judge (or None)."""
        workflow_object, workflow_path = self._resolve("workflow", workflow)
        judge_object, judge_path = self._resolve("judge", judge) if judge is not None else (None, None)
        self._replace(workflow=workflow_path, judge=judge_path)
        self._workflow, self._judge = workflow_object, judge_object
        return self

    @staticmethod
    def _resolve(field: str, target: Callable[..., Any] | type | str) -> tuple[Any, str | None]:
        if isinstance(target, str):
            try:
                return import_object(target), target
            except ConfigError as error:
                raise ConfigError(f"{field}: {error}") from None
        if not callable(target):
            raise ConfigError(f"{field}: expected a function, a class or an import path, got {type(target).__name__}")
        return target, importable_path(target)

    def set_data(
        self,
        train: DatasetSpec | None = None,
        eval: DatasetSpec | None = None,
        *,
        type: str | None = None,
        dataset_path: str | os.PathLike[str] | None = None,
        training_split: str = "train",
        validation_split: str | None = "test",
    ) -> Job:
        """Set the training and eval datasets; with no `eval`, `train.eval_fraction` of the tasks is held out.

        AgentJet's form, ``set_data(type="hf", dataset_path=DIR)``, reads the `training_split` and the
        `validation_split` (None: none) of a local dataset folder, or the tasks of one file (no eval split).
        """
        if type is not None or dataset_path is not None:
            if train is not None or eval is not None or type is None or dataset_path is None:
                raise ConfigError(
                    "set_data: give `train` (and `eval`), or AgentJet's `type` and `dataset_path` together, not both"
                )
            train, eval = _agentjet_data(type, dataset_path, training_split, validation_split)
        self._replace(train_dataset=_dataset_config(train), eval_dataset=_dataset_config(eval))
        return self

    def dump_yaml(self, path: str | os.PathLike[str]) -> Job:
        """Write the job as YAML for `load_yaml` or ``sparring train``; the workflow and judge must be importable."""
        for role, obj, import_path in (
            ("workflow", self._workflow, self.config.workflow),
            ("judge", self._judge, self.config.judge),
        ):
            if obj is not None and import_path is None:
                name = getattr(obj, "__qualname__", repr(obj))
                raise ConfigError(
                    f"cannot save the job: the {role} {name!r} is not importable (a lambda, a function defined inside "
                    "another function, or one typed into an interactive session); define it at the top level of a "
                    "module or script to save the job as YAML, or call tune() in this process"
                )
        dump_config(self.config, path)
        return self

    def dump_job_as_yaml(self, path: str | os.PathLike[str]) -> Job:
        """AgentJet's name for `dump_yaml`."""
        return self.dump_yaml(path)

    def load_job_from_yaml(self, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Job:
        """AgentJet's way to load a YAML file: into this job, replacing its config.

        The workflow and judge objects set here are kept when the file names the same import paths
        (a job dumped, edited by hand and loaded again); otherwise the file's are imported when it runs.
        """
        loaded = load_config_file(path, overrides)
        if loaded.workflow != self.config.workflow:
            self._workflow = None
        if loaded.judge != self.config.judge:
            self._judge = None
        self.config = loaded
        return self

    def tune(self, resume: str | None = None, overwrite: bool = False, hooks: Sequence[Any] = ()) -> Any:
        """Run the training loop in this process and return its RunResult; `resume` is a run folder to continue,
        `overwrite` replaces the run in `run_dir` (a folder holding a run is refused without one of the two), and
        `hooks` are step hooks (`StepHook`) run after the config's `step_hooks`."""
        if self._workflow is None and self.config.workflow is None:
            raise ConfigError(
                "workflow: not set; call set_workflow(...), or give `workflow: package.module:function` in "
                "the YAML file"
            )
        from .loop import run_training

        return run_training(
            self.config, workflow=self._workflow, judge=self._judge, resume=resume, overwrite=overwrite, hooks=hooks
        )


MAPPED: dict[str, tuple[str, str]] = {
    "num_repeat": ("algorithm", "group_size"),
    "grpo_n": ("algorithm", "group_size"),
    "batch_size": ("algorithm", "batch_size"),
    "lr": ("algorithm", "learning_rate"),
    "lora_rank": ("model", "lora_rank"),
    "max_model_len": ("model", "max_model_len"),
    "max_response_length_in_one_turn": ("model", "max_tokens"),
}
"""AgentJet argument -> (TuneConfig section, field) it sets."""

NOT_APPLYING: dict[str, str] = {
    "n_gpu": "one process trains on model.device",
    "n_gpu_for_infer": "sampling shares the training process's model",
    "backbone": "sparring's own engine trains, not verl or trinity",
    "tinkerscript_mode": "no launcher modes",
    "swarm_mode": "episodes run in this process (or on Ray: runner.backend)",
    "swarm_mode_sample_collection_method": "a step waits for its whole batch",
    "max_env_worker": "episodes in flight: runner.max_concurrency",
    "gpu_memory_utilization": "no vLLM engine to size",
    "mini_batch_num": "one optimizer step per training step",
    "ppo_epochs": "one pass per batch",
    "max_prompt_length": "prompts are bounded by model.max_model_len",
    "max_response_length": "replies are bounded per turn by model.max_tokens",
    "lora_alpha": "not a setting here",
    "lora_target_modules": "adapters cover the engine's fixed set of projections",
    "lora_load_format": "adapters are saved as PEFT safetensors",
    "layered_summon": "no sharded weights to gather",
    "compute_madness_checklist": "not a check here",
    "base_yaml_config": "an AgentJet YAML file does not load: Job.load_yaml reads sparring's",
    "ensure_new_experiment": "a run folder holding a run is refused unless resumed or overwritten",
    "project_name": "runs are named by run_dir",
}
"""AgentJet argument -> why it does not apply to sparring's one-process engine (said in the note)."""

RUN_DIR_ARGUMENTS = ("experiment_dir", "experiment_name")
"""AgentJet's run location: `experiment_dir/experiment_name` becomes `run_dir`."""

AGENTJET_ARGUMENTS = frozenset(MAPPED) | frozenset(NOT_APPLYING) | frozenset(RUN_DIR_ARGUMENTS) | {"logging"}
"""Every AgentJet job argument a `Job` accepts beside its own."""


def agentjet_fields(fields: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Apply AgentJet's `arguments` to a Job's TuneConfig `fields` (in place); the note on those that do not apply.

    A mapped argument that contradicts the same field given in `model=` / `algorithm=` is a ConfigError naming
    both; AgentJet's `lora_rank=0` (full fine-tuning) is noted, since sparring always trains a LoRA adapter.
    `logging` is AgentJet's backend name ('tensorboard', 'wandb' with `project_name`; others are noted).
    """
    ignored = {name: value for name, value in arguments.items() if name in NOT_APPLYING and value is not None}
    for name, value in arguments.items():
        if name not in MAPPED or value is None:
            continue
        if name == "lora_rank" and value == 0:
            ignored[name] = value
            continue
        section, field = MAPPED[name]
        current = fields.get(section)
        values = dict(current) if current is not None else {}
        if current is not None and field in _given(current) and values[field] != value:
            raise ConfigError(f"{name}={value!r} contradicts {section}.{field}={values[field]!r}; give one of them")
        fields[section] = {**values, field: value}
    backend = arguments.get("logging")
    if backend == "tensorboard":
        fields["logging"] = {"tensorboard": True}
    elif backend == "wandb":
        fields["logging"] = {"wandb_project": arguments.get("project_name") or "sparring"}
        ignored.pop("project_name", None)  # it named the W&B project
    elif backend is not None:
        ignored["logging"] = backend
    run_dir = _run_dir(arguments.get("experiment_dir"), arguments.get("experiment_name"))
    if run_dir is not None:
        if fields.get("run_dir") is not None and fields["run_dir"] != run_dir:
            raise ConfigError(
                f"experiment_dir / experiment_name ({run_dir}) contradict run_dir={fields['run_dir']!r}; "
                "give one of them"
            )
        fields["run_dir"] = run_dir
    if not ignored:
        return None
    reasons = "; ".join(f"{name}={value!r} ({_reason(name)})" for name, value in ignored.items())
    return f"AgentJet job arguments that do not apply on this machine, accepted and not used: {reasons}"


def _given(section: Any) -> set[str]:
    """The fields a section value sets itself: a dict's keys, a config record's explicitly set fields."""
    return set(section) if isinstance(section, dict) else set(getattr(section, "model_fields_set", ()))


def _reason(name: str) -> str:
    if name == "lora_rank":
        return "sparring always trains a LoRA adapter; rank stays model.lora_rank"
    if name == "logging":
        return "metrics go to metrics.jsonl, TensorBoard or W&B: logging='tensorboard' | 'wandb'"
    return NOT_APPLYING[name]


def _run_dir(experiment_dir: Any, experiment_name: Any) -> str | None:
    if experiment_dir is None and experiment_name is None:
        return None
    parent = os.fspath(experiment_dir) if experiment_dir is not None else "saved_experiments"
    return os.path.join(parent, experiment_name) if experiment_name is not None else parent
