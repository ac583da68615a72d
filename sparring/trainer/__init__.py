"""The RL loop behind `tune()`: job configuration (records, YAML file, import paths), its resolution into a run,
task datasets, the job object.

Names are imported on first use (PEP 562): the config's records and file reader load without torch, so a bad
config is reported before the heavy imports.
"""

from typing import TYPE_CHECKING

_HOMES = {
    **dict.fromkeys(("CheckpointError", "NonFiniteWeightsError"), "checkpoint_integrity"),
    **dict.fromkeys(("AlgorithmConfig", "LoggingConfig", "TuneConfig", "TunerModelConfig"), "config"),
    **dict.fromkeys(("apply_overrides", "dump_config", "load_config_file"), "config_file"),
    **dict.fromkeys(("TaskStream", "load_tasks", "load_train_and_eval_tasks", "split_eval"), "dataset"),
    "DatasetConfig": "dataset_config",
    "DatasetError": "dataset_layout",
    "EpisodesFailingError": "failure_streak",
    "import_object": "imports",
    "Job": "job",
    **dict.fromkeys(("LEAGUE_TASK_KEY", "League", "OPPONENT_ARG"), "league"),
    "LeagueConfig": "league_config",
    **dict.fromkeys(("CheckpointsConfig", "EvaluationConfig", "RunnerConfig"), "run_config"),
    **dict.fromkeys(("RunResult", "run_training", "run_training_async"), "loop"),
    "ValidationConfig": "validation_config",
    "WarmStartConfig": "warm_start_config",
    "ConfigError": "schema",
    **dict.fromkeys(("StepEnd", "StepHook", "StepStart"), "step_hooks"),
    "NothingTrainedError": "training_signal",
    "tune": "tune",
    **dict.fromkeys(("WorkflowArgs", "takes_args"), "workflow_args"),
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
    from .checkpoint_integrity import CheckpointError, NonFiniteWeightsError
    from .config import AlgorithmConfig, LoggingConfig, TuneConfig, TunerModelConfig
    from .config_file import apply_overrides, dump_config, load_config_file
    from .dataset import TaskStream, load_tasks, load_train_and_eval_tasks, split_eval
    from .dataset_config import DatasetConfig
    from .dataset_layout import DatasetError
    from .failure_streak import EpisodesFailingError
    from .imports import import_object
    from .job import Job
    from .league import LEAGUE_TASK_KEY, OPPONENT_ARG, League
    from .league_config import LeagueConfig
    from .loop import RunResult, run_training, run_training_async
    from .run_config import CheckpointsConfig, EvaluationConfig, RunnerConfig
    from .schema import ConfigError
    from .step_hooks import StepEnd, StepHook, StepStart
    from .training_signal import NothingTrainedError
    from .tune import tune
    from .validation_config import ValidationConfig
    from .warm_start_config import WarmStartConfig
    from .workflow_args import WorkflowArgs, takes_args


def __getattr__(name: str):
    import importlib

    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
