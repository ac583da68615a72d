"""The RL loop behind `tune()`: job configuration (records, YAML file, import paths), its resolution into a run, task datasets, the job object."""

from .config import AlgorithmConfig, DatasetConfig, LoggingConfig, TuneConfig, TunerModelConfig
from .config_file import apply_overrides, dump_config, load_config_file
from .dataset import DatasetError, TaskStream, load_tasks, load_train_and_eval_tasks, split_eval
from .imports import import_object
from .failure_streak import EpisodesFailingError
from .job import Job
from .league import OPPONENT_ARG, League
from .league_config import LeagueConfig
from .loop import RunResult, run_training, run_training_async
from .schema import ConfigError
from .training_signal import NothingTrainedError
from .tune import tune

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "EpisodesFailingError",
    "Job",
    "League",
    "LeagueConfig",
    "RunResult",
    "LoggingConfig",
    "NothingTrainedError",
    "OPPONENT_ARG",
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
