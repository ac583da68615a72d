"""What the engine does to an adapter: train it, step it, save and load it.

Each function runs on the engine's worker (submit it with `engine.call`) and
acts on one named adapter. Optimizers are per adapter (AdamW, Tinker
semantics: hyperparameters come with every step); checkpoints are written
atomically — into a temporary directory that is renamed into place — so a
crash mid-save never leaves a half-written checkpoint where a good one was.

A training checkpoint (`save_state`) is a directory with the adapter in PEFT
format under `adapter/`, `optimizer.pt`, and `state.json`; sampler weights
(`save_for_sampler`) are a bare PEFT directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..types import AdamParams, Datum, ForwardBackwardOutput, OptimStepResponse
from .engine import Engine
from .learner import prepare_data, run_forward
from .losses import check_loss_config


def create_adapter(
    engine: Engine, rank: int, seed: int | None, train_attn: bool, train_mlp: bool, train_unembed: bool
) -> str:
    name = engine.new_name("lora")
    targets = engine.bank.target_modules(train_attn, train_mlp, train_unembed)
    engine.bank.create(name, rank=rank, target_modules=targets, seed=seed)
    return name


def forward_backward(
    engine: Engine,
    adapter: str,
    data: list[Datum],
    loss_fn: str,
    loss_fn_config,
    backward: bool,
    untrained_logprobs: bool = True,
) -> ForwardBackwardOutput:
    config = check_loss_config(loss_fn, loss_fn_config)
    prepared = prepare_data(data, loss_fn, engine.vocab_size)
    with engine.bank.use(adapter):
        return run_forward(
            engine.bank.base_model, prepared, loss_fn, config, backward=backward,
            token_budget=engine.config.token_budget(), prefix_tree=engine.config.learner_prefix_tree,
            fused=engine.config.fused_learner_ops, pack_weights=engine.config.pack_cpu_weights,
            untrained_logprobs=untrained_logprobs,
        )  # fmt: skip


def optim_step(engine: Engine, adapter: str, params: AdamParams) -> OptimStepResponse:
    parameters = engine.bank.parameters(adapter)
    optimizer = engine.optimizers.get(adapter)
    if optimizer is None:
        optimizer = engine.optimizers[adapter] = torch.optim.AdamW(parameters, lr=params.learning_rate)
    for group in optimizer.param_groups:
        group.update(
            lr=params.learning_rate,
            betas=(params.beta1, params.beta2),
            eps=params.eps,
            weight_decay=params.weight_decay,
        )
    max_norm = params.grad_clip_norm if params.grad_clip_norm > 0 else float("inf")
    with_grad = [p for p in parameters if p.grad is not None]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(with_grad, max_norm)) if with_grad else 0.0
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    engine.optimizer_steps[adapter] += 1
    return OptimStepResponse(metrics={"grad_norm": grad_norm, "step": float(engine.optimizer_steps[adapter])})


def save_for_sampler(engine: Engine, adapter: str, path: Path) -> Path:
    return _atomic_dir(path, lambda tmp: engine.bank.save(adapter, tmp))


def save_state(engine: Engine, adapter: str, path: Path, metadata: dict) -> Path:
    def write(tmp: Path) -> None:
        engine.bank.save(adapter, tmp / "adapter")
        optimizer = engine.optimizers.get(adapter)
        torch.save({"optimizer": optimizer.state_dict() if optimizer else None}, tmp / "optimizer.pt")
        state = {
            "rank": engine.bank.adapters[adapter].rank,
            "optimizer_steps": engine.optimizer_steps[adapter],
            **metadata,
        }
        (tmp / "state.json").write_text(json.dumps(state, indent=2))

    return _atomic_dir(path, write)


def read_state(path: Path) -> dict:
    state_file = Path(path) / "state.json"
    if not state_file.exists():
        raise FileNotFoundError(
            f"{path} is not a sparring training checkpoint (no state.json); sampler weights load with "
            "create_sampling_client"
        )
    return json.loads(state_file.read_text())


def is_bare_adapter(path: Path) -> bool:
    """A PEFT adapter directory (adapter_config.json), not a training checkpoint (state.json)."""
    return not (path / "state.json").exists() and (path / "adapter_config.json").exists()


def saved_rank(path: str | Path) -> int:
    """The LoRA rank of a training checkpoint or a bare PEFT adapter directory."""
    path = Path(path)
    return (
        json.loads((path / "adapter_config.json").read_text())["r"]
        if is_bare_adapter(path)
        else read_state(path)["rank"]
    )


def load_state(engine: Engine, adapter: str, path: Path, with_optimizer: bool) -> dict:
    """Load a training checkpoint (adapter, and optimizer when asked), or the weights of a bare PEFT adapter dir."""
    path = Path(path)
    if is_bare_adapter(path):
        state, weights = {"rank": saved_rank(path), "optimizer_steps": 0}, path
        with_optimizer = False
    else:
        state, weights = read_state(path), path / "adapter"
    rank = engine.bank.adapters[adapter].rank
    if state["rank"] != rank:
        raise ValueError(f"{path} holds a LoRA of rank {state['rank']}, this client has rank {rank}")
    engine.bank.load_weights_into(adapter, weights)
    engine.optimizers.pop(adapter, None)
    engine.optimizer_steps[adapter] = 0
    if with_optimizer:
        saved = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)["optimizer"]
        if saved is not None:
            optimizer = engine.optimizers[adapter] = torch.optim.AdamW(engine.bank.parameters(adapter))
            optimizer.load_state_dict(saved)
        engine.optimizer_steps[adapter] = state["optimizer_steps"]
    return state


def _atomic_dir(path: Path, write) -> Path:
    """Build a directory in a sibling temp dir, then swap it into `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        write(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
