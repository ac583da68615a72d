"""Where checkpoints of served models live, and how `tinker://` paths name them.

The SDK names checkpoints `tinker://<weights key>/weights/<name>` (training
state: adapter + optimizer, from save_state) and
`tinker://<weights key>/sampler_weights/<name>` (a PEFT adapter, from
save_weights_for_sampler). `CheckpointStore` maps those names onto
`<root>/<weights key>/<kind>/<name>` and back; the mapping is a pure function
of the name, so checkpoints stay loadable after a server restart. The
weights key of a model is a random token of its own, never its model id, so
a path handed around (to an evaluation script, as an OpenAI `model` name)
lets its holder read those weights and nothing else. Only paths of that
shape are accepted, and the directory they name is resolved and must lie
under `root`: a client can never make the server read or write outside it
(`tinker://../weights/outside` is refused).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("weights", "sampler_weights")
MAX_NAME = 128
"""Longest weights key or checkpoint name."""
_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}$")


def model_key(model_id: str) -> str:
    """A model id as one safe directory name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model_id)


def check_name(field: str, name: str) -> str:
    """`name` if it is a valid checkpoint name; ValueError naming `field` otherwise."""
    if not _NAME.match(name):
        raise ValueError(
            f"{field}: checkpoint name {name[:MAX_NAME]!r} must be 1-{MAX_NAME} letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (no slashes)"
        )
    return name


@dataclass(frozen=True)
class CheckpointStore:
    """tinker:// checkpoint names <-> directories under one root."""

    root: Path
    """Directory holding every served model's checkpoints."""

    def tinker_path(self, weights_key: str, kind: str, name: str) -> str:
        return f"tinker://{weights_key}/{kind}/{name}"

    def local(self, tinker_path: str, kind: str | None = None) -> Path:
        """The directory of a tinker:// checkpoint; ValueError naming the problem if the path is not one."""
        if not isinstance(tinker_path, str) or not tinker_path.startswith("tinker://"):
            raise ValueError(
                f"checkpoint path must be a tinker:// path returned by this server, got {tinker_path[:200]!r}"
            )
        parts = tinker_path.removeprefix("tinker://").split("/")
        if (
            len(parts) != 3
            or parts[1] not in KINDS
            or not _NAME.match(model_key(parts[0]))
            or not _NAME.match(parts[2])
        ):
            raise ValueError(
                "checkpoint path must look like tinker://<weights key>/weights/<name> or "
                f".../sampler_weights/<name>, got {tinker_path[:200]!r}"
            )
        if kind is not None and parts[1] != kind:
            raise ValueError(f"{tinker_path} is a {parts[1]} checkpoint; this call needs a {kind} one")
        path = (self.root / model_key(parts[0]) / parts[1] / parts[2]).resolve()
        if not path.is_relative_to(self.root.resolve()) or not path.is_dir():
            raise FileNotFoundError(f"no checkpoint at {tinker_path}")
        return path


def adapter_dir(checkpoint: Path) -> Path:
    """The PEFT directory inside a checkpoint (training state keeps it under adapter/)."""
    return checkpoint / "adapter" if (checkpoint / "adapter" / "adapter_config.json").exists() else checkpoint


def lora_shape(checkpoint: Path, layer_groups: dict[str, set[str]]) -> dict:
    """Rank and trained layer groups of a saved adapter, in the SDK's LoraConfig terms."""
    config_file = adapter_dir(checkpoint) / "adapter_config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{checkpoint.name} holds no LoRA adapter (no adapter_config.json)")
    config = json.loads(config_file.read_text())
    targets = set(config.get("target_modules") or [])
    return {
        "rank": int(config["r"]),
        "train_attn": bool(targets & layer_groups["attn"]),
        "train_mlp": bool(targets & layer_groups["mlp"]),
        "train_unembed": bool(targets & layer_groups["unembed"]),
    }
