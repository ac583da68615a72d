"""The RL loop behind `tune()`: job configuration (records, YAML file, import paths), its resolution into a run, task datasets, the job object."""

from .checkpoint_integrity import CheckpointError, NonFiniteWeightsError
from .config import AlgorithmConfig, DatasetConfig, LoggingConfig, TuneConfig, TunerModelConfig
from .config_file import apply_overrides, dump_config, load_config_file
from .dataset import DatasetError, TaskStream, load_tasks, load_train_and_eval_tasks, split_eval
from .imports import import_object
from .failure_streak import EpisodesFailingError
from .job import Job
from .loop import RunResult, run_training, run_training_async
from .schema import ConfigError
from .training_signal import NothingTrainedError
from .tune import tune

__all__ = [
    "AlgorithmConfig",
    "CheckpointError",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "EpisodesFailingError",
    "Job",
    "RunResult",
    "LoggingConfig",
    "NonFiniteWeightsError",
    "NothingTrainedError",
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
