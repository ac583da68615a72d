"""Checkpoints that verify themselves: a manifest of every file a checkpoint needs, and checks of what those files hold.

A checkpoint is spread over several places (its step folder, each model's training state, the older weights and
snapshot opponents it names), any of which a crash, a full disk or a hand can damage. `write_manifest` records the
name, size and sha256 of every such file in `manifest.json`, written last and atomically (`write_atomically`, before
`latest.json` points at the checkpoint), and `verify_manifest` refuses a checkpoint whose files are missing,
truncated or changed,
naming the first bad file in one line (`CheckpointError`). `check_training_state` then reads what a model's state
holds -- no more optimizer steps than the checkpoint's step, an adapter config that parses, finite adapter and
optimizer tensors -- so a checkpoint written without a manifest (before manifests existed) is refused on the same
grounds, and a NaN saved by a bug is never trained on. `check_finite_weights` runs after every optimizer step, so a
NaN is named at the step that produced it and never reaches a saved adapter.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import threading
from pathlib import Path

import torch
from safetensors.torch import load_file

MANIFEST = "manifest.json"
"""The file, in a checkpoint's step folder, listing every file the checkpoint needs."""


class CheckpointError(ValueError):
    """A checkpoint cannot be resumed (a file missing, truncated, changed or holding non-finite numbers), or training
    produced weights that must not be saved; the message names the file or the step, on one line."""


class CheckpointSaveError(CheckpointError):
    """A checkpoint could not be written (a full disk, a read-only folder); the message names where and what is
    intact."""


def one_line(error: BaseException) -> str:
    """An error's message on one line (torch's write errors span several)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


class NonFiniteWeightsError(CheckpointError):
    """An optimizer step left NaN or infinite adapter weights: the run stops before they are saved."""


def write_manifest(directory: Path, run_dir: Path, sources: list[Path]) -> Path:
    """Record every file under `sources` (files or folders) in `directory/manifest.json`, atomically."""
    files = {}
    for source in sources:
        for path in sorted([source] if source.is_file() else (p for p in source.rglob("*") if p.is_file())):
            files[_name(path, run_dir)] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest = directory / MANIFEST
    write_atomically(manifest, json.dumps({"files": files}, indent=1))
    return manifest


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader sees the old file or the whole new one, never a part."""
    temporary = path.with_name(
        f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    )  # the pipeline saves from a thread
    temporary.write_text(text)
    os.replace(temporary, path)


def verify_manifest(directory: Path, run_dir: Path) -> bool:
    """Check every file the manifest lists; CheckpointError naming the first bad one. False when there is no
    manifest."""
    manifest = directory / MANIFEST
    if not manifest.exists():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"checkpoint {directory}: {manifest} is damaged ({error}); resume from an older checkpoint by "
            "pointing checkpoints/latest.json at it"
        ) from None
    for name, expected in files.items():
        path = Path(name) if os.path.isabs(name) else run_dir / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory}: {path} is missing")
        size = path.stat().st_size
        if size != expected["size"]:
            raise CheckpointError(
                f"checkpoint {directory}: {path} has {size} bytes, {expected['size']} were saved "
                "(truncated or overwritten)"
            )
        if _sha256(path) != expected["sha256"]:
            raise CheckpointError(f"checkpoint {directory}: {path} changed since it was saved (sha256 differs)")
    return True


def check_training_state(path: Path, step: int) -> None:
    """Read a model's saved training state (`save_state`'s folder) and refuse it, naming the file, unless it was saved
    after at most `step` optimizer steps and its adapter config parses and its adapter and optimizer tensors are
    finite."""
    state_file, config_file = path / "state.json", path / "adapter" / "adapter_config.json"
    state = _read_json(state_file)
    steps = state.get("optimizer_steps")
    if not isinstance(steps, int) or not 0 <= steps <= step:  # fewer when a step gave a model nothing to train on
        raise CheckpointError(
            f"{state_file}: saved after {steps!r} optimizer steps, more than the checkpoint's {step} steps allow"
        )
    if not isinstance(_read_json(config_file).get("r"), int):
        raise CheckpointError(f"{config_file}: no LoRA rank 'r' in it")
    for weights in sorted((path / "adapter").glob("*.safetensors")):
        try:
            tensors = load_file(weights)
        except Exception as error:  # noqa: BLE001 - any unreadable file is one line naming it
            raise CheckpointError(f"{weights}: unreadable ({type(error).__name__}: {error})") from None
        _refuse_non_finite(weights, tensors.items())
    optimizer_file = path / "optimizer.pt"
    try:
        optimizer = torch.load(optimizer_file, map_location="cpu", weights_only=False)["optimizer"]
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{optimizer_file}: unreadable ({type(error).__name__}: {error})") from None
    if optimizer is not None:
        _refuse_non_finite(
            optimizer_file,
            (
                (f"state {index} {name}", value)
                for index, entry in optimizer["state"].items()
                for name, value in entry.items()
            ),
        )


async def check_finite_weights(clients: dict, step: int) -> None:
    """After optimizer step `step` (counted from 1): NonFiniteWeightsError naming it when a model's adapter holds NaN
    or infinity. Local models are read on their engine; a service's weights are its own to check."""
    for key, client in clients.items():
        engine = getattr(client, "engine", None)
        if engine is None:
            continue
        parameters = engine.bank.parameters
        finite = await asyncio.wrap_future(
            engine.call(
                lambda adapter=client.adapter, parameters=parameters: all(
                    bool(torch.isfinite(p).all()) for p in parameters(adapter)
                )
            )
        )
        if not finite:
            raise NonFiniteWeightsError(
                f"step {step}: the optimizer step left NaN or infinite weights in model {key!r}; they were "
                "not saved (the latest checkpoint is "
                "the step before it, or earlier); lower algorithm.learning_rate or algorithm.grad_clip_norm and resume"
            )


def _refuse_non_finite(path: Path, tensors) -> None:
    for name, value in tensors:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values")
        if isinstance(value, float) and not math.isfinite(value):
            raise CheckpointError(f"{path}: {name} is {value}")


def _read_json(path: Path) -> dict:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return loaded


def _name(path: Path, run_dir: Path) -> str:
    """A manifest entry: relative to the run folder when inside it (the folder can move), else absolute."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path.resolve())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
