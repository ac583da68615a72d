"""Adapters out of sparring: a saved LoRA adapter as a portable PEFT directory, or merged into a whole model.

`export_adapter(adapter_dir, out)` copies a saved adapter with its config
pointing at the base model's hub id where the catalogue knows one, else its
Hugging Face directory (`task_type: CAUSAL_LM`), and the base's tokenizer
beside it, so `AutoPeftModelForCausalLM.from_pretrained(out)` loads it
anywhere the base is (older adapters that name their base by its sparring
name or a local path are fixed on the way).
With ``merged=True`` the adapter is folded into the base weights and `out`
is a plain Hugging Face model directory (config, safetensors, tokenizer),
which transformers loads as is, and vLLM or llama.cpp's converter take.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..models import hub_id
from ..models.loading import model_directory
from .adapters import BASE_MODEL_DIR_FILE, BASE_MODEL_FILE, quiet_peft_wrap

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", BASE_MODEL_FILE, BASE_MODEL_DIR_FILE)


def base_model_name(adapter_dir: Path) -> str:
    """The adapter's base as sparring names it: its sparring name when saved with one, else its config's base."""
    named = adapter_dir / BASE_MODEL_FILE
    if named.is_file():
        return named.read_text(encoding="utf-8").strip()
    base = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{adapter_dir / 'adapter_config.json'} does not name its base model")
    return base


def export_adapter(adapter_dir: str | Path, out: str | Path, *, merged: bool = False) -> Path:
    """Write the adapter at ``adapter_dir`` to the new directory ``out``: as a portable adapter, or ``merged`` into
    its base."""
    adapter_dir, out = Path(adapter_dir), Path(out)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter_dir} is not a PEFT adapter directory (no adapter_config.json)")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; export into a new directory")
    base_name = base_model_name(adapter_dir)
    base = model_directory(base_name)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    out.mkdir(parents=True, exist_ok=True)
    if merged:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, local_files_only=True)
        with quiet_peft_wrap():
            adapted = PeftModel.from_pretrained(model, str(adapter_dir))
        adapted.merge_and_unload().save_pretrained(out)
    else:
        for file_name in ADAPTER_FILES:
            if (adapter_dir / file_name).is_file():
                shutil.copy2(adapter_dir / file_name, out / file_name)
        config_path = out / "adapter_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config.update(base_model_name_or_path=hub_id(base_name) or str(base), task_type="CAUSAL_LM")
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(out)
    return out
