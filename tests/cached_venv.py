"""Small venvs for tests that run a real third-party client in its own environment, built once and kept.

`cached_venv(request, tmp_path_factory, key, build)` returns the Python of a venv kept in the pytest cache under
`key` (or, under `-p no:cacheprovider`, built for this run only). `build(run, python)` fills a fresh venv:
`run(*command)` runs one command and fails the test with its output if it fails; the venv is staged and
renamed into place only when complete, so an interrupted build is started over, never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

Run = Callable[..., str]


def cached_venv(request, tmp_path_factory, key: str, build: Callable[[Run, Path], None]) -> Path:
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir(key) if cache is not None else tmp_path_factory.mktemp(key)
    python = root / "venv" / "bin" / "python"
    if (root / "venv" / "ready").exists():
        return python
    for interrupted in root.glob("staging-*"):
        shutil.rmtree(interrupted, ignore_errors=True)
    staging = root / f"staging-{os.getpid()}"
    quiet = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "env": {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}}

    def run(*command: str | Path) -> str:
        done = subprocess.run([str(part) for part in command], **quiet)
        assert done.returncode == 0, f"building the {key} venv failed at {command}:\n{done.stdout[-6000:]}"
        return done.stdout

    run(sys.executable, "-m", "venv", staging)
    build(run, staging / "bin" / "python")
    (staging / "ready").touch()
    shutil.rmtree(root / "venv", ignore_errors=True)
    staging.rename(root / "venv")
    return python
