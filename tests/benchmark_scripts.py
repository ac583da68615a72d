"""Loading a script of benchmarks/ as a module, for the tests of its pieces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (registered under NAME: its dataclasses look their module up there)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the scripts import their shared `common`
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[name] = script
    spec.loader.exec_module(script)
    return script
