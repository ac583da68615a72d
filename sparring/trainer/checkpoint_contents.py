"""What a checkpoint's files hold, checked against each other and the model before anything is loaded.

A manifest proves files are the ones saved, not that what was saved fits: a hand-edited or foreign adapter, an
optimizer state from another adapter, or a data position that is not one each end a resume in a long traceback
deep inside PEFT, torch or the task stream. These checks read shapes and fields only and refuse each misfit in
one line naming the file (`CheckpointError`):

- `check_adapter_shapes`: every LoRA tensor is a 2-D `lora_A` (rank x in) or `lora_B` (out x rank) of the rank in
  `adapter_config.json` and `state.json`, each `lora_A` paired with a `lora_B`;
- `check_optimizer_state`: the optimizer state holds one entry per adapter tensor, each of that tensor's shape;
- `check_data_position`: the trainer state's data position has its four fields, integers in range;
- `check_adapter_fits_model`: the adapter's tensors are the ones the model's adapter holds, of the same shapes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch
from safetensors import safe_open

from .checkpoint_integrity import CheckpointError

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
