"""The RL loop behind `tune()`: job configuration, task datasets and the job object."""

from .config import (
    AlgorithmConfig,
    ConfigError,
    DatasetConfig,
    LoggingConfig,
    TuneConfig,
    TunerModelConfig,
    apply_overrides,
    dump_config,
    import_object,
    load_config_file,
)
from .dataset import DatasetError, TaskStream, load_tasks, load_train_and_eval_tasks, split_eval
from .job import Job
from .loop import RunResult, run_training, run_training_async
from .tune import tune

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "Job",
    "RunResult",
    "LoggingConfig",
    "TaskStream",
    "TuneConfig",
    "TunerModelConfig",
    "apply_overrides",
    "dump_config",
    "import_object",
    "load_config_file",
    "load_tasks",
    "load_train_and_eval_tasks",
    "run_training",
    "run_training_async",
    "split_eval",
    "tune",
]
