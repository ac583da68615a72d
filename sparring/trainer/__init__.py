"""The RL trainer behind `tune()`, one module a concept.

The job's configuration: `config` (the records a job file holds, written back as YAML, its models found on this
machine), `sections` (its datasets, league, validation, warm start, logging and run mechanics), `schema` (the record
base, its errors and bounds, `WorkflowArgs`), `config_file` (the YAML read, ``--set``, import paths, the names
checked). Entering a run: `job` (`tune()`, `Job`), `resolve` (a config made runnable, its models and hooks built).
What a run is made of: `models` (policies, snapshots, the league), `dataset` (tasks from files and dataset folders,
and the task stream that batches them per step), `step` (a step's rollout, update, hooks; the warm start),
`pipeline` (the step sequence and the run loop at any staleness), `evaluation` (held-out evaluation beside baselines,
the `best` adapter), `checkpoints` (and the resume points they hold), `safeguards` (what stops a run on damage), and
`loop` (`run_training`: the run folder, stop signals, the result).

Names are imported on first use (PEP 562): the config's records and file reader load without torch, so a bad
config is reported before the heavy imports.
"""

from typing import TYPE_CHECKING

_HOMES = {
    **dict.fromkeys(("AlgorithmConfig", "TuneConfig", "TunerModelConfig", "dump_config"), "config"),
    **dict.fromkeys(("apply_overrides", "import_object", "load_config_file"), "config_file"),
    **dict.fromkeys(("DatasetError", "TaskStream", "load_tasks", "load_train_and_eval_tasks", "split_eval"), "dataset"),
    **dict.fromkeys(("Job", "tune"), "job"),
    **dict.fromkeys(("RunResult", "run_training", "run_training_async"), "loop"),
    **dict.fromkeys(("LEAGUE_TASK_KEY", "League", "OPPONENT_ARG"), "models"),
    **dict.fromkeys(
        ("CheckpointError", "EpisodesFailingError", "NonFiniteWeightsError", "NothingTrainedError"), "safeguards"
    ),
    **dict.fromkeys(("ConfigError", "WorkflowArgs", "takes_args"), "schema"),
    **dict.fromkeys(
        (
            "CheckpointsConfig",
            "DatasetConfig",
            "EvaluationConfig",
            "LeagueConfig",
            "LoggingConfig",
            "RunnerConfig",
            "ValidationConfig",
            "WarmStartConfig",
        ),
        "sections",
    ),
    **dict.fromkeys(("StepEnd", "StepHook", "StepStart"), "step"),
}
"""Each public name -> the module of this package it comes from."""

# Written out (not `sorted(_HOMES)`) so that tools see the names the TYPE_CHECKING imports re-export.
__all__ = [
    "AlgorithmConfig",
    "CheckpointError",
    "CheckpointsConfig",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "EpisodesFailingError",
    "EvaluationConfig",
    "Job",
    "LEAGUE_TASK_KEY",
    "League",
    "LeagueConfig",
    "LoggingConfig",
    "NonFiniteWeightsError",
    "NothingTrainedError",
    "OPPONENT_ARG",
    "RunResult",
    "RunnerConfig",
    "StepEnd",
    "StepHook",
    "StepStart",
    "TaskStream",
    "TuneConfig",
    "TunerModelConfig",
    "ValidationConfig",
    "WarmStartConfig",
    "WorkflowArgs",
    "apply_overrides",
    "dump_config",
    "import_object",
    "load_config_file",
    "load_tasks",
    "load_train_and_eval_tasks",
    "run_training",
    "run_training_async",
    "split_eval",
    "takes_args",
    "tune",
]

if TYPE_CHECKING:
    from .config import AlgorithmConfig, TuneConfig, TunerModelConfig, dump_config
    from .config_file import apply_overrides, import_object, load_config_file
    from .dataset import DatasetError, TaskStream, load_tasks, load_train_and_eval_tasks, split_eval
    from .job import Job, tune
    from .loop import RunResult, run_training, run_training_async
    from .models import LEAGUE_TASK_KEY, OPPONENT_ARG, League
    from .safeguards import CheckpointError, EpisodesFailingError, NonFiniteWeightsError, NothingTrainedError
    from .schema import ConfigError, WorkflowArgs, takes_args
    from .sections import (
        CheckpointsConfig,
        DatasetConfig,
        EvaluationConfig,
        LeagueConfig,
        LoggingConfig,
        RunnerConfig,
        ValidationConfig,
        WarmStartConfig,
    )
    from .step import StepEnd, StepHook, StepStart


def __getattr__(name: str):
    import importlib

    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
