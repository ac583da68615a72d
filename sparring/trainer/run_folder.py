"""Run folders never mix: a training run starts in a new or empty folder, continues its own with `resume`, or
replaces a finished one with `overwrite`.

Re-running into a folder that holds a run would append a second run's steps to
the first's metrics (steps 1, 2, 1, 2: one zig-zag curve in the report) and mix
their checkpoints and rollouts, so `claim_run_folder` refuses it in one line
that names both ways on (the shape of the cookbook's
`behavior_if_log_dir_exists`). A folder holds a run when it holds one of
`RUN_MARKERS`; `overwrite` deletes only such a folder, and a folder of other
files is used as it is, never deleted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .schema import ConfigError

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoints")
"""What a training run writes first: a folder holding one of these is a sparring run."""


def claim_run_folder(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Make `run_dir` ready for a new run (or check it for a resumed one); ConfigError when that would mix runs."""
    if resume:
        if overwrite:
            raise ConfigError("give resume (continue the run) or overwrite (replace it), not both")
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(
                f"resume: {run_dir} holds no run to continue (no config.yaml there); give the folder a "
                "training run wrote"
            )
        return
    if not any((run_dir / marker).exists() for marker in RUN_MARKERS):
        return  # new, empty, or other files only (e.g. `sparring eval`'s eval.json): no run to mix with
    if not overwrite:
        raise ConfigError(
            f"run_dir: {run_dir} already holds a run; continue it with --resume {run_dir} (tune(resume=...)), "
            f"replace it with --overwrite (tune(overwrite=True)), or choose another run_dir"
        )
    shutil.rmtree(run_dir)
