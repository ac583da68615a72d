"""One base model, many named LoRA adapters, through peft.

`AdapterBank` wraps the base model in a `peft.PeftModel` on first use and
keeps every adapter by name: trainable ones (each with its own optimizer,
held by the engine) and frozen ones (snapshots of a trainable adapter, or
adapters loaded from a PEFT directory). Only the LoRA matrices are copied;
the base weights exist once. `use(name)` activates an adapter (or none, for
the base model) for the next forward; `inference(name, merge=True)` folds it
into the base weights for sampling, until `unmerge()` restores them. A merge
keeps a copy of W aside and writes W + BA in place, so unmerging copies back
the very same W: merging and unmerging in floating point (W + BA - BA) would
drift the base weights a little every time. In place, because the sampler may
have made neighbouring weights share one buffer (fused projections). The
price is a second copy of the adapted weights while merged.

Saved adapters are plain PEFT directories (adapter_config.json +
adapter_model.safetensors), loadable by `peft.PeftModel.from_pretrained` and
by vLLM. Their config says `task_type: CAUSAL_LM` and names as base the
model's Hugging Face hub id where the catalogue knows one
(`HuggingFaceTB/SmolLM2-135M-Instruct`), else the Hugging Face directory the
base weights came from, so `AutoPeftModelForCausalLM.from_pretrained(adapter_dir)`
loads one with no sparring around, on another machine too. sparring's own
metadata sits beside it: the sparring name of the base (a catalogue name such
as `smollm2-135m-instruct`, or the path given) in `BASE_MODEL_FILE`, and the
local directory of its weights in `BASE_MODEL_DIR_FILE`.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from ..models import hub_id

DEFAULT_LORA_ALPHA = 32
BASE_MODEL_FILE = "sparring_base_model.txt"
"""In a saved adapter: the base model as sparring names it (what `get_engine` loads it by)."""
BASE_MODEL_DIR_FILE = "sparring_base_model_dir.txt"
"""In a saved adapter: the local Hugging Face directory the base weights came from (the config names the hub id)."""
_SERIALS = itertools.count()


def linear_layer_groups(model: torch.nn.Module) -> dict[str, set[str]]:
    """Leaf names of the model's linear layers, grouped as attention, MLP and the LM head ('unembed')."""
    groups: dict[str, set[str]] = {"attn": set(), "mlp": set(), "unembed": set()}
    head = model.get_output_embeddings()
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            leaf = path.rsplit(".", 1)[-1]
            group = "unembed" if module is head else "attn" if ("attn" in path or "attention" in path) else "mlp"
            groups[group].add(leaf)
    return groups


@dataclass
class AdapterInfo:
    """What the bank knows about one adapter."""

    name: str
    """Unique name inside the bank."""
    rank: int
    """LoRA rank."""
    trainable: bool
    """False for snapshots and loaded sampler weights."""
    serial: int = field(default_factory=lambda: next(_SERIALS))
    """Unique to this adapter in the process: an adapter deleted and made again under its name is another one."""


@contextlib.contextmanager
def quiet_peft_wrap():
    """Wrapping a model, peft reads `is_gradient_checkpointing`, which transformers 5 deprecates with a FutureWarning
    that the user can do nothing about; only that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


class AdapterBank:
    """Named LoRA adapters over one shared base model."""

    def __init__(self, base_model: torch.nn.Module, base_model_name: str, base_model_dir: Path | None = None):
        """``base_model_dir``: the Hugging Face directory of the base weights, named in saved adapters' configs."""
        self.base_model = base_model
        self.base_model_name = base_model_name
        self.base_model_dir = base_model_dir
        self.linear_groups = linear_layer_groups(base_model)
        self.peft_model: PeftModel | None = None
        self.adapters: dict[str, AdapterInfo] = {}
        self.merged_adapter: str | None = None
        self._unmerged_weights: list[tuple[LoraLayer, torch.Tensor]] = []

    @property
    def causal_lm(self) -> torch.nn.Module:
        """The model to run: the peft-wrapped one once an adapter exists."""
        return self.peft_model if self.peft_model is not None else self.base_model

    def target_modules(self, train_attn: bool = True, train_mlp: bool = True, train_unembed: bool = False) -> list[str]:
        chosen = {"attn": train_attn, "mlp": train_mlp, "unembed": train_unembed}
        names = sorted(set().union(*(self.linear_groups[g] for g, on in chosen.items() if on)))
        if not names:
            raise ValueError("no layers to train: enable at least one of train_attn, train_mlp, train_unembed")
        return names

    def create(
        self,
        name: str,
        rank: int,
        target_modules: list[str],
        seed: int | None = None,
        alpha: float = DEFAULT_LORA_ALPHA,
    ) -> AdapterInfo:
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"LoRA rank must be a positive integer, got {rank!r}")
        config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=target_modules, bias="none")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self._add(name, config)
        return self._register(name, rank, trainable=True)

    def snapshot(self, source: str, name: str) -> AdapterInfo:
        """A frozen copy of `source`'s current LoRA weights."""
        config = self.peft_model.peft_config[source]
        self._add(name, config)
        set_peft_model_state_dict(
            self.peft_model, get_peft_model_state_dict(self.peft_model, adapter_name=source), adapter_name=name
        )
        return self._register(name, self.adapters[source].rank, trainable=False)

    def load(self, name: str, path: str | Path, trainable: bool) -> AdapterInfo:
        path = Path(path)
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
        if self.peft_model is None:
            with quiet_peft_wrap():
                self.peft_model = PeftModel.from_pretrained(
                    self.base_model, str(path), adapter_name=name, is_trainable=trainable
                )
        else:
            self.peft_model.load_adapter(str(path), adapter_name=name, is_trainable=trainable)
        return self._register(name, self.peft_model.peft_config[name].r, trainable=trainable)

    def save(self, name: str, path: str | Path) -> Path:
        """Write `name` as a PEFT directory at `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = copy.copy(self.peft_model.peft_config[name])
        local = str(self.base_model_dir) if self.base_model_dir is not None else self.base_model_name
        config.base_model_name_or_path = hub_id(self.base_model_name) or local
        config.task_type = "CAUSAL_LM"
        config.save_pretrained(str(path))
        (path / BASE_MODEL_FILE).write_text(self.base_model_name + "\n", encoding="utf-8")
        (path / BASE_MODEL_DIR_FILE).write_text(local + "\n", encoding="utf-8")

        state = {
            k: v.detach().to("cpu").contiguous()
            for k, v in get_peft_model_state_dict(
                self.peft_model, adapter_name=name, save_embedding_layers=False
            ).items()
        }
        save_file(state, str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
        return path

    def state_shapes(self, name: str) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape of `name` as `save` writes it (to check a saved adapter fits before loading it)."""
        state = get_peft_model_state_dict(self.peft_model, adapter_name=name, save_embedding_layers=False)
        return {key: tuple(value.shape) for key, value in state.items()}

    def load_weights_into(self, name: str, path: str | Path) -> None:
        """Overwrite an existing adapter's weights from a PEFT directory of the same shape."""
        state = load_file(str(Path(path) / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(self.peft_model, state, adapter_name=name)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"{path} does not match adapter {name!r}: unexpected keys {result.unexpected_keys[:3]}")

    def delete(self, name: str) -> None:
        if name in self.adapters:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*was active which is now deleted.*")
                self.peft_model.delete_adapter(name)
            del self.adapters[name]
            self._name_a_known_adapter_active()

    def fingerprint(self, name: str | None) -> tuple:
        """What the weights of `name` (None: the base model) are now: equal fingerprints, equal weights. The adapter's
        serial and the version counters of its LoRA tensors, which every in-place write bumps (an optimizer step,
        loading weights); the base weights never change (a merge puts back the very same values)."""
        if name is None:
            return ()
        self._check(name)
        return (self.adapters[name].serial, tuple(p._version for p in self.parameters(name)))

    def parameters(self, name: str) -> list[torch.nn.Parameter]:
        marker = f".{name}."
        return [p for n, p in self.peft_model.named_parameters() if marker in n and "lora_" in n]

    @contextlib.contextmanager
    def use(self, name: str | None):
        """Run the next forwards with adapter `name` active, or with no adapter when None."""
        if name is None:
            if self.peft_model is None or not self.adapters:
                # With every adapter deleted, peft still names one active and `disable_adapter` fails on it;
                # the LoRA layers skip adapters they no longer hold, so the model runs as the base model.
                yield self.base_model
            else:
                with self.peft_model.disable_adapter():
                    yield self.peft_model
            return
        self._check(name)
        # peft's set_adapter unmerges a merged model: skip it when this adapter is the merged one.
        if self.merged_adapter != name:
            self.peft_model.set_adapter(name, inference_mode=not self.adapters[name].trainable)
        yield self.peft_model

    @contextlib.contextmanager
    def inference(self, name: str | None, merge: bool):
        """Like `use`, for forwards without gradient; with merge, the adapter is folded into the base weights.

        A merge stays in place after the block (consecutive sampling batches for one adapter pay for it once);
        `unmerge` must run before anything reads gradients of, or changes, LoRA weights.
        """
        merge = merge and name is not None and not self._adapts_tied_head(name)
        if self.merged_adapter not in (None, name if merge else None):
            self.unmerge()
        with self.use(name) as model:
            if merge and self.merged_adapter is None:
                self._merge(name)
            yield model

    def unmerge(self) -> None:
        with torch.no_grad():
            for layer, weight in self._unmerged_weights:
                layer.get_base_layer().weight.copy_(weight)
                layer.merged_adapters.remove(self.merged_adapter)
        self._unmerged_weights = []
        self.merged_adapter = None

    def _merge(self, name: str) -> None:
        with torch.no_grad():
            for layer in self.peft_model.modules():
                if isinstance(layer, LoraLayer) and name in layer.lora_A:
                    base = layer.get_base_layer()
                    # In place: the weight keeps its storage, which the sampler may share with its neighbours
                    # (decoder.py).
                    self._unmerged_weights.append((layer, base.weight.detach().clone()))
                    base.weight.add_(layer.get_delta_weight(name).to(base.weight.dtype))
                    # peft's forward now runs the base layer alone, as after its own merge.
                    layer.merged_adapters.append(name)
        self.merged_adapter = name

    def _adapts_tied_head(self, name: str) -> bool:
        # Merging into a head tied to the input embeddings would change the embeddings too.
        head = self.base_model.get_output_embeddings()
        tied = (
            head.base_layer.weight is self.base_model.get_input_embeddings().weight
            if hasattr(head, "base_layer")
            else False
        )
        return tied and name in getattr(head, "lora_A", {})

    def _add(self, name: str, config: LoraConfig) -> None:
        if name in self.adapters:
            raise ValueError(f"an adapter named {name!r} already exists")
        if self.peft_model is None:
            with quiet_peft_wrap():
                self.peft_model = get_peft_model(self.base_model, config, adapter_name=name)
        else:
            self.peft_model.add_adapter(name, config)

    def _register(self, name: str, rank: int, trainable: bool) -> AdapterInfo:
        info = AdapterInfo(name=name, rank=rank, trainable=trainable)
        self.adapters[name] = info
        self._name_a_known_adapter_active()
        for parameter in self.parameters(name):
            parameter.requires_grad_(trainable)
        return info

    def _name_a_known_adapter_active(self) -> None:
        # peft keeps naming a deleted adapter active (also once new ones are added), and `disable_adapter` fails on it.
        if self.adapters and self.peft_model.active_adapter not in self.adapters:
            info = next(iter(self.adapters.values()))
            self.peft_model.set_adapter(info.name, inference_mode=not info.trainable)

    def _check(self, name: str) -> None:
        if name not in self.adapters:
            raise KeyError(f"unknown adapter {name!r}; known: {sorted(self.adapters)}")
