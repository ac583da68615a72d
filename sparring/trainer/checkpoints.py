"""Run checkpoints and the resume points they are written from: everything needed to continue a run as if it never
stopped.

A checkpoint is `run_dir/checkpoints/step_<N>/`: one training-state directory per trainable model (adapter + optimizer,
via `save_state`) and `trainer_state.json` (step, data position, Python/NumPy/torch RNG, and the saved adapter and step
of every snapshot opponent, the league's pool and records), written last. `manifest.json` (every file the checkpoint
needs, with its size and sha256, `safeguards.py`) is written after everything else, and `latest.json` points at the
newest complete checkpoint and is replaced atomically, so a run killed mid-save resumes from the previous one. Every
file is written atomically (a temporary name, then a rename); the temporary files and folders a killed save leaves
(names starting with '.') are removed when a run starts (`clean_interrupted_saves`). Resuming verifies the manifest
(`safeguards.py`) and what the models' states hold before loading anything (`verify_checkpoint`; its manifest and data
position already when the run is resolved, `saved_trainer_state`, and the task stream starts there; all of it, against
the built models, in `restore_checkpoint`), and refuses a damaged checkpoint in one line naming the bad file. A manifest
proves files are the ones saved, not that what was saved fits: `check_adapter_shapes` (every LoRA tensor a 2-D `lora_A`
or `lora_B` of the configured rank, paired), `check_optimizer_state` (one entry per adapter tensor, of its shape),
`check_data_position` (the data position's four fields, integers in range) and `check_adapter_fits_model` (the adapter's
tensors are the model's) refuse each misfit before anything is loaded, instead of a long traceback deep inside PEFT,
torch or the task stream. A checkpoint whose step was saved already is not written again, so a kill then cannot damage
it. When rollouts run ahead, the older weights a checkpoint names are deleted once no rollout needs them, and the
checkpoints that named them go with them (`prune_unresumable`), so every checkpoint kept resumes on its own. With
`checkpoints.keep` only the newest N complete checkpoints stay (`prune_oldest`): a run that saves every step does not
fill the disk with optimizer states.

For a model on a Tinker-protocol service (backend 'tinker') the training state is saved on the service:
`trainer_state.json` records the path the service returned (`tinker://...`) and the model's backend, and resuming
loads that state (weights and optimizer) into a new model on the service. Snapshot opponents are saved wherever their
source model lives, the same way.

A `ResumePoint` is where a step's rollout starts: the data position (`TaskStream`), RNG state and snapshot opponents,
and, when rollouts run ahead of training (`algorithm.max_staleness` > 0, `pipeline.py`), the saved weights of the
older versions the next rollouts sample from. `ResumePoints` records a step's point the first time the run reaches it
and forgets it once a later step has finished; the checkpoint after `s` steps holds the point of step `s` (and the
metrics record of step `s`, to repair a torn metrics.jsonl), so a resumed run redoes exactly the rollouts that were
in flight.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from ..clients import RemoteTrainingClient
from .dataset import TaskStream
from .models import TrainingModels
from .safeguards import (
    MANIFEST,
    CheckpointError,
    CheckpointSaveError,
    check_training_state,
    one_line,
    verify_manifest,
    write_atomically,
    write_manifest,
)

log = logging.getLogger(__name__)


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
        snapshots = {
            name: {"path": snapshot.path, "step": snapshot.step}
            for name, snapshot in models.snapshots.items()
            if snapshot.path
        }
        league = models.league.state_dict() if models.league is not None else {}
        return cls(data=stream.state_dict(), rng=rng, snapshots=snapshots, league=league)


def save_checkpoint(run_dir: Path, step: int, models, point: ResumePoint, metrics: dict | None = None) -> Path:
    """Write the checkpoint of `step` (unless a complete one is there: the weights have not changed since) and point
    `latest.json` at it; `metrics` is the step's metrics.jsonl record, kept to repair a torn last line."""
    directory = run_dir / "checkpoints" / f"step_{step:06d}"
    before = _pointed_at(run_dir)
    try:
        if not (directory / MANIFEST).exists():
            _write_checkpoint(run_dir, directory, step, models, point, metrics)
        write_atomically(run_dir / "checkpoints" / "latest.json", json.dumps({"path": str(directory)}))
    except (OSError, RuntimeError) as error:  # a full disk, a read-only folder, a service that failed to save
        where = getattr(error, "filename", None) or directory
        saved = (
            f"the checkpoint of step {int(before.name.removeprefix('step_'))} ({before}) is intact"
            if before
            else "no checkpoint was saved before it"
        )
        reason = (
            f"{error.strerror} (errno {error.errno})"
            if isinstance(error, OSError) and error.strerror
            else f"{type(error).__name__}: {one_line(error)}"
        )
        raise CheckpointSaveError(
            f"could not write the checkpoint of step {step} at {where}: {reason}; {saved}"
        ) from error
    return directory


def _write_checkpoint(
    run_dir: Path, directory: Path, step: int, models, point: ResumePoint, metrics: dict | None
) -> None:
    """The models' training states, RNGs, trainer state, then the manifest: each file atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    futures = {key: client.save_state(f"run-step-{step:06d}") for key, client in models.clients.items()}
    model_paths = {key: future.result().path for key, future in futures.items()}
    temporary = directory / f".rng.pt.{os.getpid()}.{threading.get_ident()}.tmp"
    torch.save(point.rng, temporary)
    os.replace(temporary, directory / "rng.pt")
    backends = {key: _backend(client) for key, client in models.clients.items()}
    state = {
        "step": step,
        "models": model_paths,
        "backends": backends,
        "data": point.data,
        "snapshots": point.snapshots,
    }
    if point.league:
        state["league"] = point.league
    if metrics is not None:
        state["metrics"] = metrics
    if point.versions:
        state["versions"] = {str(version): paths for version, paths in sorted(point.versions.items())}
    sources = [directory / "trainer_state.json", directory / "rng.pt", *_local_paths(state)]
    write_atomically(directory / "trainer_state.json", json.dumps(state, indent=2))
    write_manifest(directory, run_dir, sources)


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest.json"
    if not pointer.exists():
        if not (Path(run_dir) / "config.yaml").exists():
            raise FileNotFoundError(f"{run_dir} is not a sparring run directory (no config.yaml)")
        return None
    try:
        return Path(json.loads(pointer.read_text())["path"])
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f'{pointer} is damaged ({type(error).__name__}: {error}); write {{"path": "<a '
            'checkpoints/step_N folder>"} into it'
        ) from None


def final_adapters(run_dir: Path) -> dict[str, Path]:
    """Per trainable model of a finished run, its final sampler weights (a PEFT adapter directory)."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet: no adapter to export")
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    found = {}
    for key, path in state["models"].items():
        if state.get("backends", {}).get(key) == "tinker":
            raise ValueError(
                f"model {key!r} of {run_dir} was trained on a Tinker-protocol service; its weights live there ({path})"
            )
        final = Path(path).parent.parent / "sampler_weights" / "final"
        if not (final / "adapter_config.json").exists():
            raise FileNotFoundError(
                f"model {key!r} of {run_dir} has no final adapter at {final} (was the run stopped before its end?)"
            )
        found[key] = final
    return found


@dataclass(frozen=True)
class SavedCheckpoint:
    """A resumed run's latest checkpoint, read once: `resolve_run` checks its manifest and data position and builds the
    task stream there, `restore_checkpoint` loads the rest from the same state."""

    directory: Path
    """The checkpoint's folder (`checkpoints/step_<N>`)."""
    state: dict
    """Its trainer state as `saved_trainer_state` returned it (its `metrics` repair a torn metrics.jsonl)."""


def restore_checkpoint(saved: SavedCheckpoint, models) -> tuple[int, dict[int, dict[str, str]]]:
    """Verify the rest of the checkpoint against the built models (CheckpointError naming the bad file), then load it
    into the models and RNGs; returns its step and the older weights versions it names."""
    directory = saved.directory
    state = verify_checkpoint(directory, lambda key: _model_shapes(models.clients.get(key)), saved.state)
    unknown = set(state["models"]) ^ set(models.clients)
    if unknown:
        raise CheckpointError(
            f"checkpoint {directory} holds models {sorted(state['models'])}, the config trains {sorted(models.clients)}"
        )
    for key, backend in state.get("backends", {}).items():
        if backend != _backend(models.clients[key]):
            raise CheckpointError(
                f"checkpoint {directory} saved model {key!r} on backend {backend!r}; the config now puts "
                f"it on {_backend(models.clients[key])!r}"
            )
    for future in [models.clients[key].load_state(path) for key, path in state["models"].items()]:
        future.result()
    for name, snapshot in state.get("snapshots", {}).items():
        models.load_snapshot(name, snapshot["path"], snapshot["step"])
    if models.league is not None and "league" in state:
        models.league.load_state_dict(state["league"])
    rng = _read_rng(directory)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    return int(state["step"]), {int(version): paths for version, paths in state.get("versions", {}).items()}


def verify_checkpoint(
    directory: Path, model_shapes: Callable[[str], dict | None] | None = None, state: dict | None = None
) -> dict:
    """The checkpoint's trainer state, once its manifest and its local models' states check out; CheckpointError
    otherwise.

    `model_shapes` gives, for a model key, its adapter's tensor shapes (None when unknown): the saved adapter must
    match them. `state`: what `saved_trainer_state` returned for it already (its first checks passed)."""
    state = saved_trainer_state(directory) if state is None else state
    for key, path in state["models"].items():
        if state.get("backends", {}).get(key, "local") == "local":
            check_training_state(Path(path), state["step"])
            shapes = check_adapter_shapes(Path(path))
            expected = model_shapes(key) if model_shapes is not None else None
            if expected is not None:
                check_adapter_fits_model(Path(path), expected)
            check_optimizer_state(Path(path), shapes)
    _read_rng(directory)
    return state


def saved_trainer_state(directory: Path) -> dict:
    """The checkpoint's trainer state, once its manifest checks out and its data position is whole; CheckpointError
    otherwise. The first checks of `verify_checkpoint`: a resumed run's task stream is built from it before any model
    loads."""
    run_dir = directory.parent.parent
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory} is missing")
    if not verify_manifest(directory, run_dir):
        log.warning(
            "checkpoint %s has no %s (written before checkpoints listed their files): its files are not "
            "verified, only read",
            directory,
            MANIFEST,
        )
    state_file = directory / "trainer_state.json"
    try:
        state = json.loads(state_file.read_text())
        state["step"], state["models"] = int(state["step"]), dict(state["models"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{state_file}: unreadable ({type(error).__name__}: {error})") from None
    check_data_position(state_file, state.get("data"))
    return state


def _model_shapes(client) -> dict | None:
    """A local model's adapter tensor shapes, read on its engine; None for a model elsewhere (or unknown)."""
    engine = getattr(client, "engine", None)
    if engine is None:
        return None
    return engine.call(lambda: engine.bank.state_shapes(client.adapter)).result()


def _read_rng(directory: Path) -> dict:
    try:
        rng = torch.load(directory / "rng.pt", weights_only=False)
        return {name: rng[name] for name in ("torch", "numpy", "python")}
    except Exception as error:  # noqa: BLE001 - an unreadable file is one line naming it
        raise CheckpointError(f"{directory / 'rng.pt'}: unreadable ({type(error).__name__}: {error})") from None


def prune_unresumable(run_dir: Path) -> list[Path]:
    """Delete the checkpoints (and their models' training states) that name weights deleted since; returns them.

    The one `latest.json` points at is always kept."""
    latest = latest_checkpoint(run_dir)
    pruned = []
    for directory in sorted((run_dir / "checkpoints").glob("step_*")):
        if directory == latest or not (directory / "trainer_state.json").exists():
            continue
        state = json.loads((directory / "trainer_state.json").read_text())
        if all(path.exists() for path in _local_paths(state)):
            continue
        _delete_checkpoint(directory, state)
        pruned.append(directory)
    return pruned


def prune_oldest(run_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints (and their models' training states); returns them.

    The one `latest.json` points at is always kept; a checkpoint still being written (no manifest yet) is not
    touched."""
    latest = latest_checkpoint(run_dir)
    complete = [
        directory for directory in sorted((run_dir / "checkpoints").glob("step_*")) if (directory / MANIFEST).exists()
    ]
    pruned = []
    for directory in [directory for directory in complete[: max(len(complete) - keep, 0)] if directory != latest]:
        try:
            state = json.loads((directory / "trainer_state.json").read_text())
        except FileNotFoundError:  # pruned meanwhile by the pipeline (`prune_unresumable`)
            continue
        _delete_checkpoint(directory, state)
        pruned.append(directory)
    return pruned


def _delete_checkpoint(directory: Path, state: dict) -> None:
    """The checkpoint's folder and the models' training states it names (snapshots and older weights are shared,
    kept)."""
    for path in _local_paths({"models": state["models"]}):
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)


def _pointed_at(run_dir: Path) -> Path | None:
    """The checkpoint `latest.json` points at; None without one (or with a damaged one)."""
    try:
        return latest_checkpoint(run_dir)
    except (OSError, CheckpointError):
        return None


def clean_interrupted_saves(run_dir: Path) -> list[Path]:
    """Remove the temporary files and folders (names starting with '.') that saves killed halfway left under the run's
    checkpoints; returns them."""
    found = (
        [path for path in (run_dir / "checkpoints").glob("**/.*") if path.name.startswith(".")]
        if (run_dir / "checkpoints").is_dir()
        else []
    )
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found


def _local_paths(state: dict) -> list[Path]:
    """The local files and folders a trainer state names: models' training states, older weights, snapshot opponents."""
    named = [*state.get("models", {}).values(), *(snapshot["path"] for snapshot in state.get("snapshots", {}).values())]
    named += [path for paths in state.get("versions", {}).values() for path in paths.values()]
    return [Path(path) for path in dict.fromkeys(named) if not str(path).startswith("tinker://")]


def _backend(client) -> str:
    return "tinker" if isinstance(client, RemoteTrainingClient) else "local"


class ResumePoints:
    """The resume point of every step reached and not yet outdated, and the checkpoints written from them."""

    def __init__(
        self, run_dir: Path, stream: TaskStream, models: TrainingModels, first_step: int, keep: int | None = None
    ) -> None:
        self.run_dir = run_dir
        self.stream = stream
        self.models = models
        self.keep = keep
        """Checkpoints kept (`checkpoints.keep`): older ones are deleted after each save; None keeps all."""
        self.reached: dict[int, ResumePoint] = {}
        """Step -> where its rollout starts, for each step reached and not yet outdated by a later finished step."""
        self.logged: dict[int, dict] = {}
        """Steps finished -> the record metrics.jsonl got for it, kept in its checkpoint (to repair a torn line)."""
        self.reach(first_step)

    def reach(self, step: int) -> None:
        """Record where the rollout of `step` starts (the first call for a step counts): before its snapshots,
        evaluation and tasks."""
        self.reached.setdefault(step, ResumePoint.now(self.stream, self.models))

    def advance(self, steps: int, logged: dict | None = None) -> None:
        """`steps` steps have finished (`logged`: the metrics record of the last): reach the next one and forget the
        points of those before it."""
        self.reach(steps)
        for outdated in [step for step in self.reached if step < steps]:
            del self.reached[outdated]
        if logged is not None:
            self.logged = {steps: logged}

    def checkpoint(self, steps: int, versions: dict[int, dict[str, str]] | None = None) -> Path:
        """Write the checkpoint after `steps` steps; `versions`: the older weights (version -> model key -> saved path)
        that the rollouts from `steps` on sample, when they run ahead of training."""
        point = self.reached[steps]
        if versions:
            point = dataclasses.replace(point, versions=versions)
        saved = save_checkpoint(self.run_dir, steps, self.models, point, self.logged.get(steps))
        if self.keep is not None:
            prune_oldest(self.run_dir, self.keep)
        return saved


DATA_FIELDS = ("epoch", "position", "step", "num_tasks")
"""The fields of a task stream's saved position (`TaskStream.state_dict`)."""


def saved_shapes(weights: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a safetensors file, read from its header only."""
    try:
        with safe_open(str(weights), framework="pt") as file:
            return {name: tuple(file.get_slice(name).get_shape()) for name in file.keys()}
    except Exception as error:  # noqa: BLE001 - any unreadable file is one line naming it
        raise CheckpointError(f"{weights}: unreadable ({type(error).__name__}: {error})") from None


def check_adapter_shapes(state_dir: Path) -> dict[str, tuple[int, ...]]:
    """The adapter's tensor shapes, once each is a LoRA factor of the saved rank; CheckpointError naming the file."""
    weights = state_dir / "adapter" / "adapter_model.safetensors"
    rank = json.loads((state_dir / "adapter" / "adapter_config.json").read_text())["r"]
    shapes = saved_shapes(weights)
    if not shapes:
        raise CheckpointError(f"{weights}: holds no tensors")
    for name, shape in sorted(shapes.items()):
        factor = "lora_A" if ".lora_A." in name else "lora_B" if ".lora_B." in name else None
        if factor is None:
            raise CheckpointError(f"{weights}: tensor {name} is not a LoRA factor (lora_A or lora_B)")
        at = 0 if factor == "lora_A" else 1
        if len(shape) != 2 or shape[at] != rank:
            want = f"({rank}, in)" if factor == "lora_A" else f"(out, {rank})"
            raise CheckpointError(f"{weights}: {name} has shape {shape}, a rank-{rank} {factor} is {want}")
        partner = name.replace(f".{factor}.", ".lora_B." if factor == "lora_A" else ".lora_A.")
        if partner not in shapes:
            raise CheckpointError(f"{weights}: {name} has no {partner} beside it")
    return shapes


def check_optimizer_state(state_dir: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """The saved optimizer holds one parameter per adapter tensor, and its moments have the adapter's shapes."""
    optimizer_file = state_dir / "optimizer.pt"
    optimizer = torch.load(optimizer_file, map_location="cpu", weights_only=False)["optimizer"]
    if optimizer is None:  # saved before the model's first optimizer step
        return
    try:
        params = [index for group in optimizer["param_groups"] for index in group["params"]]
        moments = Counter(
            tuple(value.shape)
            for entry in optimizer["state"].values()
            for name, value in entry.items()
            if name in ("exp_avg", "exp_avg_sq")
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{optimizer_file}: not an optimizer state ({type(error).__name__}: {error})") from None
    if len(params) != len(shapes):
        raise CheckpointError(f"{optimizer_file}: holds {len(params)} parameters, the adapter beside it {len(shapes)}")
    expected = Counter({shape: count * 2 for shape, count in Counter(shapes.values()).items()})
    if optimizer["state"] and len(optimizer["state"]) == len(shapes) and moments != expected:
        odd = sorted(set(moments) ^ set(expected)) or sorted(moments)
        raise CheckpointError(f"{optimizer_file}: its moments' shapes do not match the adapter's (e.g. {odd[0]})")


def check_data_position(state_file: Path, data: object) -> None:
    """The trainer state's data position: its four fields, non-negative integers, the position within the tasks."""
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise CheckpointError(f"{state_file}: data position is a {kind}, not an object of {DATA_FIELDS}")
    missing = [name for name in DATA_FIELDS if name not in data]
    if missing:
        raise CheckpointError(f"{state_file}: data position lacks {missing}")
    for name in DATA_FIELDS:
        value = data[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckpointError(f"{state_file}: data position {name} is {value!r}, not a non-negative integer")
    if data["num_tasks"] < 1 or data["position"] > data["num_tasks"]:
        raise CheckpointError(f"{state_file}: data position {data['position']} is outside 0..{data['num_tasks']} tasks")


def check_adapter_fits_model(state_dir: Path, expected: dict[str, tuple[int, ...]]) -> None:
    """The saved adapter holds exactly the tensors of the model's adapter (`expected`: name -> shape), same shapes."""
    weights = state_dir / "adapter" / "adapter_model.safetensors"
    shapes = saved_shapes(weights)
    for name in sorted(set(shapes) | set(expected)):
        if name not in expected:
            raise CheckpointError(f"{weights}: tensor {name} is not in the model's adapter (another model or layers?)")
        if name not in shapes:
            raise CheckpointError(f"{weights}: lacks {name}, which the model's adapter has (another model or layers?)")
        if shapes[name] != expected[name]:
            raise CheckpointError(f"{weights}: {name} has shape {shapes[name]}, the model's is {expected[name]}")
