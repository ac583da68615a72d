"""Run records: scalar metrics (jsonl, TensorBoard, wandb), rollout dumps and transcripts, console progress,
and the run report (charts, evaluation tables, a token-level rollout browser) as one HTML file."""

from .metrics import MetricsLogger, mean_metrics, read_metrics
from .plots import write_reward_plot
from .progress import ConsoleProgress, EpisodeProgress, TrainingProgress, print_table
from .report import read_run, render_report, serve_report, write_report
from .reward_png import write_reward_png
from .rollouts import RolloutWriter, format_transcript, read_rollouts

__all__ = [
    "ConsoleProgress",
    "EpisodeProgress",
    "MetricsLogger",
    "RolloutWriter",
    "TrainingProgress",
    "format_transcript",
    "mean_metrics",
    "print_table",
    "read_metrics",
    "read_rollouts",
    "read_run",
    "render_report",
    "serve_report",
    "write_report",
    "write_reward_plot",
    "write_reward_png",
]
