"""What the AgentScope test modules share: loading an example, and running a module again against AgentScope 1.x.

`load_example(name)` imports examples/NAME.py as a module. The venv holds AgentScope 2.x (the `dev` extra);
`agentscope1_overlay()` installs AgentScope 1.x (the
`agentscope1` extra, pinned in requirements/agentscope1.txt) and what it needs beyond the venv into a cached overlay
directory (`pip_overlay`), and
`run_on_agentscope1(test_file)` checks that module's tests passed with the overlay first on `PYTHONPATH` (both
modules run in one subprocess, once a session).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from pip_overlay import pinned, pip_overlay

ROOT = Path(__file__).resolve().parents[1]
IN_SUBPROCESS_ENV = "SPARRING_AGENTSCOPE1_SUBPROCESS"


def load_example(name: str):
    """examples/NAME.py, imported as a module (examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_agentscope1_subprocess() -> bool:
    """Whether this process is the AgentScope 1.x re-run of a test module."""
    return os.environ.get(IN_SUBPROCESS_ENV) == "1"


def agentscope1_overlay() -> Path:
    """A directory holding AgentScope 1.x and what it needs beyond this venv (requirements/agentscope1.txt),
    installed once."""
    return pip_overlay(pinned("agentscope1"), Path(sys.prefix) / "agentscope1-overlay")


AGENTSCOPE1_MODULES = ("test_agentscope.py", "test_agentscope_tutorial.py")
"""The modules re-run against AgentScope 1.x, in one subprocess (one start of pytest, torch and AgentScope for both)."""


def run_on_agentscope1(test_file: Path) -> None:
    """Run `test_file`'s tests against AgentScope 1.x; fails with their output unless all pass."""
    assert test_file.name in AGENTSCOPE1_MODULES, test_file
    returncode, stdout, stderr = _agentscope1_run()
    outcomes = [line.split(" ", 1) for line in stdout.splitlines() if line.startswith(("PASSED ", "FAILED ", "ERROR "))]
    mine = [outcome for outcome, test in outcomes if test.startswith(f"tests/{test_file.name}::")]
    assert returncode == 0 and mine and set(mine) == {"PASSED"}, stdout[-4000:] + stderr[-2000:]
    assert " passed" in stdout and "failed" not in stdout


@functools.cache
def _agentscope1_run() -> tuple[int, str, str]:
    """The modules of `AGENTSCOPE1_MODULES` run once against AgentScope 1.x: exit code, stdout (every test's outcome
    listed: `-rfEp`) and stderr."""
    overlay = agentscope1_overlay()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(overlay), str(ROOT)]),
        IN_SUBPROCESS_ENV: "1",
        "AGENTSCOPE_DISABLE_CONSOLE_OUTPUT": "true",
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rfEp",
            "-p",
            "no:cacheprovider",
            *(str(ROOT / "tests" / name) for name in AGENTSCOPE1_MODULES),
            "-W",
            "ignore::DeprecationWarning",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return run.returncode, run.stdout, run.stderr
