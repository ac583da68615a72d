"""Run records: scalar metrics (jsonl, TensorBoard, wandb), rollout dumps and transcripts, console progress."""

from .metrics import MetricsLogger, mean_metrics, read_metrics
from .progress import TrainingProgress, print_table
from .rollouts import RolloutWriter, format_transcript, read_rollouts

__all__ = [
    "MetricsLogger",
    "RolloutWriter",
    "TrainingProgress",
    "format_transcript",
    "mean_metrics",
    "print_table",
    "read_metrics",
    "read_rollouts",
]
