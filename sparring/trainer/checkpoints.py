"""Run checkpoints: everything needed to continue a run as if it never stopped.

A checkpoint is `run_dir/checkpoints/step_<N>/`: one training-state
directory per trainable model (adapter + optimizer, via `save_state`) and
`trainer_state.json` (step, data position, Python/NumPy/torch RNG, and the
saved adapter and step of every snapshot opponent, the league's pool and
records), written last.
`latest.json` points at the newest complete checkpoint and is replaced
atomically, so a run killed mid-save resumes from the previous one.

For a model on a Tinker-protocol service (backend 'tinker') the training
state is saved on the service: `trainer_state.json` records the path the
service returned (`tinker://...`) and the model's backend, and resuming loads
that state (weights and optimizer) into a new model on the service. Snapshot
opponents are saved wherever their source model lives, the same way.

Besides the models' training state a checkpoint holds a `ResumePoint`: the
data position, RNG state and snapshot opponents from which the next step's
rollout starts, and, when rollouts run ahead of training
(`algorithm.max_staleness` > 0, see `pipeline.py`), the saved weights of
the older versions the next rollouts sample from. The on-policy loop takes
it as things stand after a step; the pipeline takes the one it captured when
its rollouts reached that step, so a resumed run redoes exactly the rollouts
that were in flight.
"""

from __future__ import annotations

import json
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..clients import RemoteTrainingClient
from .dataset import TaskStream


@dataclass
class ResumePoint:
    """Where the rollout of one step starts: what a resumed run restores besides the models' training state."""

    data: dict
    """The task stream's state before the step takes its tasks."""
    rng: dict
    """Python, NumPy and torch global RNG states, under 'python', 'numpy', 'torch'."""
    snapshots: dict[str, dict] = field(default_factory=dict)
    """Snapshot opponents in play: name -> {'path': saved adapter, 'step': weights version it holds}."""
    versions: dict[int, dict[str, str]] = field(default_factory=dict)
    """Older weights the next rollouts sample from (max_staleness > 0): version -> model key -> saved sampler path."""
    league: dict = field(default_factory=dict)
    """The league's pool (saved snapshot adapters) and its records against each opponent; empty without a league."""

    @classmethod
    def now(cls, stream: TaskStream, models) -> ResumePoint:
        """The point as things stand: the data position, the RNGs and snapshots of this moment."""
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
        snapshots = {name: {"path": snapshot.path, "step": snapshot.step} for name, snapshot in models.snapshots.items() if snapshot.path}
        league = models.league.state_dict() if models.league is not None else {}
        return cls(data=stream.state_dict(), rng=rng, snapshots=snapshots, league=league)


def save_checkpoint(run_dir: Path, step: int, models, point: ResumePoint) -> Path:
    directory = run_dir / "checkpoints" / f"step_{step:06d}"
    directory.mkdir(parents=True, exist_ok=True)
    futures = {key: client.save_state(f"run-step-{step:06d}") for key, client in models.clients.items()}
    model_paths = {key: future.result().path for key, future in futures.items()}
    torch.save(point.rng, directory / "rng.pt")
    backends = {key: _backend(client) for key, client in models.clients.items()}
    state = {"step": step, "models": model_paths, "backends": backends, "data": point.data, "snapshots": point.snapshots}
    if point.league:
        state["league"] = point.league
    if point.versions:
        state["versions"] = {str(version): paths for version, paths in sorted(point.versions.items())}
    _write_atomically(directory / "trainer_state.json", json.dumps(state, indent=2))
    _write_atomically(run_dir / "checkpoints" / "latest.json", json.dumps({"path": str(directory)}))
    return directory


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest.json"
    if not pointer.exists():
        if not (Path(run_dir) / "config.yaml").exists():
            raise FileNotFoundError(f"{run_dir} is not a sparring run directory (no config.yaml)")
        return None
    return Path(json.loads(pointer.read_text())["path"])


def final_adapters(run_dir: Path) -> dict[str, Path]:
    """Per trainable model of a finished run, its final sampler weights (a PEFT adapter directory)."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet: no adapter to export")
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    found = {}
    for key, path in state["models"].items():
        if state.get("backends", {}).get(key) == "tinker":
            raise ValueError(f"model {key!r} of {run_dir} was trained on a Tinker-protocol service; its weights live there ({path})")
        final = Path(path).parent.parent / "sampler_weights" / "final"
        if not (final / "adapter_config.json").exists():
            raise FileNotFoundError(f"model {key!r} of {run_dir} has no final adapter at {final} (was the run stopped before its end?)")
        found[key] = final
    return found


def restore_checkpoint(directory: Path, models, stream: TaskStream) -> tuple[int, dict[int, dict[str, str]]]:
    """Load the checkpoint into the models, stream and RNGs; returns its step and the older weights versions it names."""
    state = json.loads((directory / "trainer_state.json").read_text())
    unknown = set(state["models"]) ^ set(models.clients)
    if unknown:
        raise ValueError(f"checkpoint {directory} holds models {sorted(state['models'])}, the config trains {sorted(models.clients)}")
    for key, backend in state.get("backends", {}).items():
        if backend != _backend(models.clients[key]):
            raise ValueError(f"checkpoint {directory} saved model {key!r} on backend {backend!r}; the config now puts it on {_backend(models.clients[key])!r}")
    for future in [models.clients[key].load_state(path) for key, path in state["models"].items()]:
        future.result()
    for name, snapshot in state.get("snapshots", {}).items():
        models.load_snapshot(name, snapshot["path"], snapshot["step"])
    if models.league is not None and "league" in state:
        models.league.load_state_dict(state["league"])
    stream.load_state_dict(state["data"])
    rng = torch.load(directory / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    return int(state["step"]), {int(version): paths for version, paths in state.get("versions", {}).items()}


def _backend(client) -> str:
    return "tinker" if isinstance(client, RemoteTrainingClient) else "local"


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # the pipeline saves from a thread
    temporary.write_text(text)
    os.replace(temporary, path)
