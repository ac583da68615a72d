"""Tasks: where they come from -- files, dataset folders, a list in the config -- and the order steps take them in.

A *task* is a plain dict handed to the workflow (a game seed, a question, whatever the workflow reads). `load_tasks`
turns a `DatasetConfig` into a list of ready tasks: it reads JSON Lines, JSON, CSV, Parquet, or a dataset directory
(which of its files hold the split is `split_files`, `sparring/dataset_folders.py`), then gives every task a stable
``task_id`` and merges the config's ``workflow_args`` into the task's own (the AgentScope convention for switching
what a workflow trains without changing code). `split_eval` holds tasks out for evaluation when no eval dataset is
configured. Every failure is a `DatasetError` naming the file and row; `load_section` puts the config field first.

`TaskStream` turns the training tasks into steps: batches of `batch_size` tasks, reshuffled every epoch from
`seed + epoch`, so the order is a pure function of the config; a batch never spans two epochs. Its `state_dict`
(epoch, position, step) goes into checkpoints, and a resumed run's stream is built at that position
(`from_config(..., state=...)`), so it continues with exactly the batch it would have seen next. The warm start's
examples are batched by one too (built with the run, `resolve.py`; taught by `step.warm_start`).
"""

from __future__ import annotations

import copy
import csv
import json
import math
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..dataset_folders import SUPPORTED_SUFFIXES, DatasetError, split_files
from .config import DatasetConfig


def load_tasks(config: DatasetConfig) -> list[dict[str, Any]]:
    """Read the tasks a config names, apply `limit`, and prepare them (see `prepare_tasks`).

    CSV values stay strings (CSV has no types; a workflow converts what it
    needs). A JSON file holds a list of objects or an object with the list
    under the split name or ``data``.
    """
    if config.tasks is not None:
        origin = "the tasks list"
        rows = copy.deepcopy(config.tasks)
    else:
        origin = str(config.path)
        rows = _read_path(Path(str(config.path)), config)
    if config.limit is not None:
        rows = rows[: config.limit]
    if not rows:
        raise DatasetError(f"{origin}: no tasks found (split {config.split!r})")
    return prepare_tasks(rows, config.workflow_args, origin)


def prepare_tasks(
    rows: Sequence[dict[str, Any]], workflow_args: dict[str, Any], origin: str = "tasks"
) -> list[dict[str, Any]]:
    """Copies of `rows`, each with ``task_id`` (its index, unless it has one) and merged ``workflow_args``.

    ``task["workflow_args"] = {**workflow_args, **task["workflow_args"]}``:
    the config supplies defaults, a task's own values win.
    """
    tasks = []
    for index, row in enumerate(rows):
        task = dict(row)
        task_args = task.get("workflow_args") or {}
        if not isinstance(task_args, dict):
            raise DatasetError(
                f"{origin}: task {index}: workflow_args must be an object, got {type(task_args).__name__}"
            )
        task["workflow_args"] = {**workflow_args, **task_args}
        if task.get("task_id") is None:
            task["task_id"] = str(index)
        tasks.append(task)
    return tasks


def split_eval(
    tasks: Sequence[dict[str, Any]], fraction: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hold out `fraction` of the tasks (at least one, chosen with `seed`); both parts keep their order."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"eval fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return list(tasks), []
    eval_count = max(1, round(len(tasks) * fraction))
    if eval_count >= len(tasks):
        raise DatasetError(f"eval_fraction {fraction} of {len(tasks)} tasks leaves no training tasks")
    held_out = set(random.Random(seed).sample(range(len(tasks)), eval_count))
    train = [task for index, task in enumerate(tasks) if index not in held_out]
    evaluation = [task for index, task in enumerate(tasks) if index in held_out]
    return train, evaluation


def load_train_and_eval_tasks(
    train: DatasetConfig, evaluation: DatasetConfig | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Training and eval tasks: the eval dataset when given, else `train.eval_fraction` held out.

    Errors name the config field first (``train_dataset.path: data/train.jsonl:3: invalid JSON ...``).
    """
    tasks = load_section("train_dataset", train)
    if evaluation is not None:
        return tasks, load_section("eval_dataset", evaluation)
    try:
        return split_eval(tasks, train.eval_fraction, train.seed)
    except DatasetError as err:
        raise DatasetError(f"train_dataset.eval_fraction: {err}") from None


def load_section(field: str, config: DatasetConfig) -> list[dict[str, Any]]:
    """`load_tasks`, its errors naming the config field (`validation.dataset.path: ...`)."""
    try:
        return load_tasks(config)
    except DatasetError as err:
        raise DatasetError(f"{field}.{'tasks' if config.path is None else 'path'}: {err}") from None


def _read_path(path: Path, config: DatasetConfig) -> list[dict[str, Any]]:
    if not path.exists():
        looks_like_hub_name = re.fullmatch(r"[\w.-]+/[\w.-]+", str(path)) and path.suffix not in SUPPORTED_SUFFIXES
        hub = (
            " (if that is a Hugging Face hub name: nothing is downloaded at run time; download the dataset "
            "to a folder and give the folder)"
            if looks_like_hub_name
            else ""
        )
        raise DatasetError(
            f"dataset path {path} does not exist; give a {'/'.join(SUPPORTED_SUFFIXES)} file or a "
            f"directory of them{hub}"
        )
    if not path.is_dir():
        if config.name is not None:
            raise DatasetError(f"{path}: `name` selects a subdirectory of a dataset directory, but the path is a file")
        return _read_file(path, config.split)
    rows: list[dict[str, Any]] = []
    for file in split_files(path, config.split, config.name):
        rows.extend(_read_file(file, config.split))
    return rows


def _read_file(path: Path, split: str) -> list[dict[str, Any]]:
    readers = {
        ".jsonl": _read_jsonl,
        ".json": lambda file: _read_json(file, split),
        ".csv": _read_csv,
        ".parquet": _read_parquet,
        ".arrow": _read_arrow,
    }
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(
            f"{path}: unsupported dataset format {path.suffix!r}; use one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
    try:
        return reader(path)
    except OSError as err:
        raise DatasetError(f"{path}: cannot read the file: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _require_object(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        text = repr(row)
        text = text if len(text) <= 60 else text[:57] + "..."
        raise DatasetError(f"{where}: expected an object of task fields, got {type(row).__name__} {text}")
    return row


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as file:
        for line_number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DatasetError(
                    f"{path}:{line_number}: invalid JSON ({err.msg} at column {err.colno}); each line must "
                    "be one JSON object"
                ) from None
            rows.append(_require_object(row, f"{path}:{line_number}"))
    return rows


def _read_json(path: Path, split: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # one object per line, under a .json name
            return _read_jsonl(path)
        raise DatasetError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if isinstance(data, dict):
        key = next((key for key in (split, "data") if isinstance(data.get(key), list)), None)
        if key is None:
            raise DatasetError(
                f"{path}: expected a list of tasks, or an object with a {split!r} or 'data' list; found "
                f"keys {sorted(data)}"
            )
        data = data[key]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a list of tasks, got {type(data).__name__}")
    return [_require_object(row, f"{path}: item {index}") for index, row in enumerate(data)]


def _read_csv(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(newline="", encoding="utf-8-sig") as file:
        reader = csv.DictReader(file)
        for row in reader:
            if None in row:
                raise DatasetError(
                    f"{path}:{reader.line_num}: more values than the {len(reader.fieldnames or [])} header columns"
                )
            if any(value is None for value in row.values()):
                raise DatasetError(
                    f"{path}:{reader.line_num}: fewer values than the {len(reader.fieldnames or [])} header columns"
                )
            rows.append(dict(row))
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet  # imported on use: `import sparring` stays quick

    try:
        return pyarrow.parquet.read_table(path).to_pylist()
    except pyarrow.ArrowException as err:
        raise DatasetError(f"{path}: not a readable Parquet file: {err}") from None


def _read_arrow(path: Path) -> list[dict[str, Any]]:
    """An Arrow IPC stream (what `datasets` writes: `save_to_disk` shards, its cache files), or an Arrow IPC file."""
    import pyarrow.ipc

    try:
        with pyarrow.memory_map(str(path)) as source:
            try:
                return pyarrow.ipc.open_stream(source).read_all().to_pylist()
            except pyarrow.ArrowInvalid:
                source.seek(0)
                return pyarrow.ipc.open_file(source).read_all().to_pylist()
    except pyarrow.ArrowException as err:
        raise DatasetError(f"{path}: not a readable Arrow file: {err}") from None


class TaskStream:
    """Batches of tasks, one per training step, deterministic and resumable at step boundaries.

    A batch never spans two epochs, so the last batch of an epoch may be
    smaller. Without `total_steps` the stream runs `total_epochs` epochs;
    with it, exactly `total_steps` batches, starting new epochs as needed.
    Each yielded task is a deep copy, so a workflow may change it freely.
    """

    def __init__(
        self,
        tasks: Sequence[dict[str, Any]],
        batch_size: int,
        *,
        total_epochs: int = 1,
        total_steps: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if not tasks:
            raise DatasetError("a task stream needs at least one task")
        if batch_size < 1 or total_epochs < 1 or (total_steps is not None and total_steps < 1):
            raise ValueError(
                f"batch_size, total_epochs and total_steps must be >= 1, got {batch_size}, {total_epochs}, "
                f"{total_steps}"
            )
        self._tasks = list(tasks)
        self.batch_size = batch_size
        self.total_epochs = total_epochs
        self.total_steps = total_steps
        self.shuffle = shuffle
        self.seed = seed
        self._epoch = 0
        self._position = 0
        self._step = 0
        self._order = self._epoch_order(0)

    @classmethod
    def from_config(
        cls,
        config: DatasetConfig,
        batch_size: int,
        tasks: Sequence[dict[str, Any]] | None = None,
        state: dict[str, int] | None = None,
    ) -> TaskStream:
        """A stream over `tasks` (default: `load_tasks(config)`) with the config's epochs, steps and shuffling; at the
        saved position `state` (a checkpoint's, see `load_state_dict`) when given, else at its start."""
        stream = cls(
            load_tasks(config) if tasks is None else tasks,
            batch_size,
            total_epochs=config.total_epochs,
            total_steps=config.total_steps,
            shuffle=config.shuffle,
            seed=config.seed,
        )
        if state is not None:
            stream.load_state_dict(state)
        return stream

    @property
    def num_tasks(self) -> int:
        return len(self._tasks)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self._tasks) / self.batch_size)

    @property
    def num_steps(self) -> int:
        """Batches this stream yields in total, from its start."""
        return self.total_steps if self.total_steps is not None else self.total_epochs * self.steps_per_epoch

    @property
    def step(self) -> int:
        """Batches yielded so far (including those before a resume)."""
        return self._step

    @property
    def epoch(self) -> int:
        return self._epoch

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self._tasks)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        if self._step >= self.num_steps:
            raise StopIteration
        if self._position >= len(self._tasks):
            self._epoch += 1
            self._position = 0
            self._order = self._epoch_order(self._epoch)
        indices = self._order[self._position : self._position + self.batch_size]
        self._position += len(indices)
        self._step += 1
        return [copy.deepcopy(self._tasks[index]) for index in indices]

    def state_dict(self) -> dict[str, int]:
        """Where the stream stands; `load_state_dict` on a stream over the same tasks continues from here."""
        return {"epoch": self._epoch, "position": self._position, "step": self._step, "num_tasks": len(self._tasks)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        missing = {"epoch", "position", "step", "num_tasks"} - set(state)
        if missing:
            raise ValueError(f"task stream state lacks {sorted(missing)}")
        if state["num_tasks"] != len(self._tasks):
            raise DatasetError(
                f"the dataset has {len(self._tasks)} tasks but the saved state was taken with {state['num_tasks']}; "
                "resuming would not continue the same task order"
            )
        if not 0 <= state["position"] <= len(self._tasks):
            raise ValueError(f"task stream position {state['position']} is outside 0..{len(self._tasks)}")
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])
        self._step = int(state["step"])
        self._order = self._epoch_order(self._epoch)
