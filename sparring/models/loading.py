"""Loading a base model: weights, tokenizer and chat renderer, on one device.

``load_base_model`` is the one way every layer above (engine, servers,
examples) gets a frozen base model.  It resolves the name through the
catalogue, and for GGUF checkpoints converts once to a plain safetensors
Hugging Face directory under ``sparring_home()/models/``: transformers can
dequantise a GGUF file but takes ~20-30 s to do it and cannot save the result
(``save_pretrained`` refuses a model "quantized with gguf"), so the
conversion copies the weights into a plain model of the same config and saves
that.  Later loads read the cache directory in ~2 s.  The cache entry is
written to a temporary directory and renamed into place, so a crash or a
concurrent second conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as transformers_logging

from sparring.models.catalogue import KNOWN_MODELS, ModelSpec, UnknownModelError, resolve_model, sparring_home
from sparring.models.renderer import ChatRenderer, get_renderer

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CONVERTED_WEIGHTS_FILE = "model.safetensors"
SOURCE_RECORD_FILE = "sparring_source.json"


@dataclass
class LoadedModel:
    """A frozen base model ready for sampling and for LoRA adapters."""

    spec: ModelSpec
    """Where the model came from (catalogue name or path, and its kind)."""
    model: PreTrainedModel
    """The causal LM, in eval mode, on ``device``, with ``requires_grad`` off."""
    tokenizer: Any
    """The transformers tokenizer; always has a pad token."""
    renderer: ChatRenderer
    """Messages <-> tokens for this tokenizer."""
    device: torch.device
    """Device holding the weights."""
    dtype: torch.dtype
    """Dtype of the weights."""
    hf_dir: Path
    """The Hugging Face directory the weights came from (for a GGUF file, its converted copy): saved adapters name it
    as their base, so peft and transformers load them without sparring."""


def parse_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device that exists on this machine; ValueError (one line, what would work) otherwise."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} requested but CUDA is not available on this machine; use 'cpu'")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(
                f"device: {device!r} requested but this machine has {torch.cuda.device_count()} CUDA "
                f"device(s); use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {device!r} requested but MPS is not available on this machine; use 'cpu'")
    return parsed


def _parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The weight dtype; None and "auto" mean float32 on CPU and bfloat16 on CUDA."""
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
    elif isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
        if name in DTYPES:
            return DTYPES[name]
    allowed = ", ".join([*DTYPES, "auto"])
    raise ValueError(f"dtype: {dtype!r} is not supported; use one of {allowed}")


def converted_cache_dir(spec: ModelSpec) -> Path:
    """Directory holding the safetensors conversion of a GGUF model."""
    if spec.name.lower() in KNOWN_MODELS:
        key = spec.name.lower()
    else:
        fingerprint = f"{spec.path.resolve()}:{spec.path.stat().st_size}"
        digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:12]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.path.stem).strip("-.") or "model"
        key = f"{stem}-{digest}"
    return sparring_home() / "models" / key


def publish_directory_atomically(target: Path, write: Callable[[Path], None]) -> bool:
    """Fill a fresh temporary directory with ``write`` and rename it to ``target``.

    Readers only ever see a complete ``target``.  If another writer renamed its
    copy into place first, that copy is kept and this one discarded.  Returns
    True if this call's copy was published.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        write(staging)
        try:
            os.rename(staging, target)
            return True
        except OSError:
            if not target.is_dir():
                raise
            return False
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_staging_dirs(target: Path, older_than_s: float = 3600.0) -> None:
    """Delete temporary directories left by conversions that were killed midway (~0.5 GB each)."""
    if not target.parent.is_dir():
        return
    for staging in target.parent.glob(f".{target.name}.tmp-*"):
        try:
            age_s = time.time() - staging.stat().st_mtime
        except FileNotFoundError:  # another process published or removed it meanwhile
            continue
        if age_s > older_than_s:
            logger.info("removing stale partial conversion %s", staging)
            shutil.rmtree(staging, ignore_errors=True)


def _convert_gguf(spec: ModelSpec, target: Path) -> None:
    """Dequantise the GGUF file and save a plain float32 HF model + tokenizer at ``target``, atomically."""
    started = time.perf_counter()
    logger.info("converting GGUF %s to safetensors in %s (one time, ~30 s)", spec.path, target)
    directory, filename = str(spec.path.parent), spec.path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    gguf_model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename, dtype=torch.float32)
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(gguf_model.config).from_dict(config_dict)
    plain_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain_model.load_state_dict(gguf_model.state_dict(), strict=True)
    plain_model.generation_config = gguf_model.generation_config
    del gguf_model

    def write(staging: Path) -> None:
        plain_model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        record = {"source": str(spec.path), "source_bytes": spec.path.stat().st_size, "converted_at": time.time()}
        (staging / SOURCE_RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")

    if not publish_directory_atomically(target, write):
        logger.info("another process converted %s first; using its copy", spec.path)
    logger.info("converted %s in %.1f s", spec.path.name, time.perf_counter() - started)


def _hf_model_dir(spec: ModelSpec) -> Path:
    """The HF directory to load for a spec, converting a GGUF file on first use."""
    if spec.kind == "hf_dir":
        return spec.path
    cache_dir = converted_cache_dir(spec)
    if not cache_dir.exists():
        _remove_stale_staging_dirs(cache_dir)
        _convert_gguf(spec, cache_dir)
    elif not (cache_dir / CONVERTED_WEIGHTS_FILE).is_file() or not (cache_dir / "config.json").is_file():
        raise RuntimeError(
            f"the converted-model cache {cache_dir} is incomplete (missing {CONVERTED_WEIGHTS_FILE} or "
            "config.json); delete that directory and load again to re-convert"
        )
    return cache_dir


def model_directory(name_or_path: str) -> Path:
    """The Hugging Face directory of a catalogue model, HF directory or GGUF file (converting a GGUF file once)."""
    return _hf_model_dir(resolve_model(name_or_path)).resolve()


@contextlib.contextmanager
def _without_loading_bar():
    """transformers draws a "Loading weights" bar for a load that takes a second; the run's own progress is enough."""
    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            transformers_logging.enable_progress_bar()


def load_base_model(
    name_or_path: str,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
) -> LoadedModel:
    """Load a catalogue model, HF model directory or GGUF file as a frozen model with its tokenizer and renderer.

    ``dtype`` defaults to float32 on CPU and bfloat16 on CUDA (also what "auto" means).
    """
    torch_device = parse_device(device)
    torch_dtype = _parse_dtype(dtype, torch_device)
    spec = resolve_model(name_or_path)
    model_dir = _hf_model_dir(spec)

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with _without_loading_bar():
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype, local_files_only=True)
    model.to(torch_device)
    model.eval()
    model.requires_grad_(False)
    generation_config = model.generation_config
    if generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id
    if generation_config.eos_token_id is None:
        generation_config.eos_token_id = tokenizer.eos_token_id
    logger.info(
        "loaded %s (%s, %s) on %s in %.1f s",
        spec.name,
        model_dir,
        torch_dtype,
        torch_device,
        time.perf_counter() - started,
    )
    return LoadedModel(
        spec=spec,
        model=model,
        tokenizer=tokenizer,
        renderer=get_renderer(tokenizer),
        device=torch_device,
        dtype=torch_dtype,
        hf_dir=model_dir.resolve(),
    )


def load_tokenizer(name_or_path: str) -> tuple[Any, ChatRenderer]:
    """The tokenizer and chat renderer of a base model, without its weights (for a model served elsewhere).

    A local model (catalogue name, HF directory, .gguf file) gives exactly the tokenizer ``load_base_model``
    would: from its directory, from the converted cache, or read from the GGUF file when it was never
    converted. Any other name is taken as a Hugging Face repository id: the user named a model that lives
    on a remote service, so its tokenizer comes from the local HF cache or the hub (``HF_HUB_OFFLINE=1``
    keeps it offline).
    """
    try:
        spec = resolve_model(name_or_path)
    except UnknownModelError:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    else:
        cache_dir = converted_cache_dir(spec) if spec.kind == "gguf" else spec.path
        if spec.kind == "gguf" and not (cache_dir / "config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(str(spec.path.parent), gguf_file=spec.path.name)
        else:
            tokenizer = AutoTokenizer.from_pretrained(cache_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, get_renderer(tokenizer)
