"""The job object: a training run assembled in Python, saved as YAML, and run.

Shaped after AgentJet's job (``Job(model=..., algorithm=...)``,
``.set_workflow(...)``, ``.set_data(...)``, YAML dump/load, ``.tune()``),
a `Job` is a `TuneConfig` plus the in-process workflow and judge objects.
The YAML that `dump_yaml` writes is the file ``sparring train`` reads, so a
job sketched in a notebook can be edited by hand and launched from the
command line, and the other way round.

AgentJet's spellings are aliases: ``set_data(type="hf"|"jsonl",
dataset_path=..., training_split=..., validation_split=...)``,
``dump_job_as_yaml`` and ``load_job_from_yaml`` (which loads into this job),
and its job arguments (``n_gpu=8``, ``num_repeat``, ``lr``, ...) are accepted:
mapped, or named in one log line as not applying (`agentjet_job`).

YAML names a workflow by import path, so only importable workflows
(functions or classes at the top level of a module or script) can be saved.
A lambda or a function defined inside another function still trains through
`tune()` in the same process; `dump_yaml` refuses it with an explanation.
"""

from __future__ import annotations

import logging as logs
import os
from collections.abc import Callable, Sequence
from typing import Any

from .agentjet_job import AGENTJET_ARGUMENTS, agentjet_fields
from .config import AlgorithmConfig, DatasetConfig, LoggingConfig, TuneConfig, TunerModelConfig
from .config_file import dump_config, load_config_file
from .imports import import_object, importable_path
from .league_config import LeagueConfig
from .run_config import CheckpointsConfig, EvaluationConfig, RunnerConfig
from .schema import ConfigError
from .validation_config import ValidationConfig
from .warm_start_config import WarmStartConfig

log = logs.getLogger(__name__)

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
        `agentjet_job`): mapped onto the config where sparring has the setting, else named in one log line.
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
