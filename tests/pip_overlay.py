"""Another release of a package beside this venv, for a test that runs it in a subprocess.

`pip_overlay(requirements, root)` resolves `requirements` against this venv,
installs only what differs (e.g. AgentScope 1.x and its extra needs, or
mindlab-toolkit with the tinker 0.22 it pins) into a directory under `root`
with `--no-deps` (so nothing resolved here, torch included, is fetched
again), and returns that directory: put it first on a subprocess's
PYTHONPATH and the overlay's packages shadow this venv's. Built once per
`root` and set of requirements, then reused; the test skips when no package
index can be reached.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


def pip_overlay(requirements: list[str], root: Path) -> Path:
    key = hashlib.sha256(json.dumps(requirements).encode()).hexdigest()[:12]
    overlay = root / key
    if (overlay / "installed").exists():
        return overlay
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    report = overlay.with_suffix(".report.json")
    overlay.parent.mkdir(parents=True, exist_ok=True)
    planned = subprocess.run([*pip, "install", "--dry-run", "--report", str(report), *requirements], capture_output=True, text=True)
    if planned.returncode != 0:
        pytest.skip(f"cannot resolve {requirements} (no package index?): {planned.stderr[-400:]}")
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in json.loads(report.read_text())["install"]]
    installed = subprocess.run([*pip, "install", "--no-deps", "--target", str(overlay), *pins], capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip(f"cannot install {pins}: {installed.stderr[-400:]}")
    (overlay / "installed").write_text("\n".join(pins))
    return overlay
