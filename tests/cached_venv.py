"""Small venvs for tests that run a real third-party client in its own environment, built once and kept.

`cached_venv(request, tmp_path_factory, pins, prepare)` returns the Python of a venv holding exactly the pinned
list `pins` (requirements/NAME.txt, written by `make lock`), kept in the pytest cache under the list's name and
digest (or, under `-p no:cacheprovider`, built for this run only). `prepare(run, python)`, if given, runs first in
the fresh venv: `run(*command)` runs one command and fails the test with its output if it fails. The venv is
staged and renamed into place only when complete, so an interrupted build is started over, never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pip_overlay import pins_digest

Run = Callable[..., str]


def cached_venv(request, tmp_path_factory, pins: Path, prepare: Callable[[Run, Path], None] | None = None) -> Path:
    key = f"{pins.stem}-venv-{pins_digest(pins)}"
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir(key) if cache is not None else tmp_path_factory.mktemp(key)
    python = root / "venv" / "bin" / "python"
    if (root / "venv" / "ready").exists():
        return python
    for interrupted in root.glob("staging-*"):
        shutil.rmtree(interrupted, ignore_errors=True)
    staging = root / f"staging-{os.getpid()}"
    quiet = {
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "text": True,
        "env": {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    }

    def run(*command: str | Path) -> str:
        done = subprocess.run([str(part) for part in command], **quiet)
        assert done.returncode == 0, f"building the {key} venv failed at {command}:\n{done.stdout[-6000:]}"
        return done.stdout

    run(sys.executable, "-m", "venv", staging)
    if prepare is not None:
        prepare(run, staging / "bin" / "python")
    run(staging / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "-r", pins)
    (staging / "ready").touch()
    shutil.rmtree(root / "venv", ignore_errors=True)
    staging.rename(root / "venv")
    return python
