"""The dataset sections of a job (`train_dataset`, `eval_dataset`, `validation.dataset`): where tasks come from.

A `DatasetConfig` names a file, a dataset folder or an in-memory list of tasks, and how they are iterated and
prepared (`workflow_args` merged into every task); reading it is `dataset.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .config_limits import MAX_EPOCHS, MAX_SEED, MAX_STEPS, MAX_TASKS
from .schema import ConfigRecord


class DatasetConfig(ConfigRecord):
    """Where tasks come from and how they are iterated."""

    path: str | None = None
    """A .jsonl/.json/.csv/.parquet file, or a dataset directory as Hugging Face `datasets` lays one out locally
    (per-split files or folders, shards, a dataset card's configs, a `save_to_disk` folder), read without that
    package."""
    name: str | None = None
    """Subset (config) name: a config of the directory's dataset card, else the subdirectory of that name."""
    split: str = "train"
    """Which split to read: the files or folder of that split ('dev' finds 'validation', 'eval' 'test', as in
    `datasets`), a saved DatasetDict's split, or a JSON file's top-level key."""
    tasks: list[dict[str, Any]] | None = None
    """The tasks as an in-memory list, instead of `path`; exactly one of the two is given."""
    total_epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS)
    """Passes over the tasks when `total_steps` is not set."""
    total_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    """Exact number of training steps; when set it replaces `total_epochs` (epochs repeat as needed)."""
    shuffle: bool = True
    """Shuffle the task order every epoch (deterministically, from `seed` and the epoch number)."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed of the per-epoch shuffle and of the eval hold-out split."""
    eval_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Fraction of the tasks held out for evaluation when no eval dataset is configured."""
    workflow_args: dict[str, Any] = Field(default_factory=dict)
    """Extra arguments for the workflow, merged into every task's `workflow_args` (task values win)."""
    limit: int | None = Field(default=None, ge=1, le=MAX_TASKS)
    """Use only the first `limit` tasks (before shuffling): quick experiments on a large file."""

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        if (self.path is None) == (self.tasks is None):
            raise ValueError("give exactly one of `path` (a file or directory) or `tasks` (a list of dicts)")
        return self
