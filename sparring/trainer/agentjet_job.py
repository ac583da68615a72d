"""AgentJet's job arguments (`AgentJetJob(n_gpu=8, backbone="verl", lr=..., ...)`) on sparring's `Job`.

AgentJet's job takes what to train (group size, batch, learning rate, LoRA rank, token lengths, where the run
goes) beside how its launcher places the work (GPUs per node, its training backbone, vLLM's memory share, swarm
workers). `agentjet_fields` maps the first kind onto the `TuneConfig` fields a `Job` is built from, and names
the second kind in one note, which `Job` logs as one line: sparring trains in one process on `model.device`, so
those settings do not apply here, and a job written for AgentJet runs with only its import changed. A name that
is neither is left to the caller (a `TypeError`, as for any unexpected keyword).
"""

from __future__ import annotations

import os
from typing import Any

from .schema import ConfigError

MAPPED: dict[str, tuple[str, str]] = {
    "num_repeat": ("algorithm", "group_size"),
    "grpo_n": ("algorithm", "group_size"),
    "batch_size": ("algorithm", "batch_size"),
    "lr": ("algorithm", "learning_rate"),
    "lora_rank": ("model", "lora_rank"),
    "max_model_len": ("model", "max_model_len"),
    "max_response_length_in_one_turn": ("model", "max_tokens"),
}
"""AgentJet argument -> (TuneConfig section, field) it sets."""

NOT_APPLYING: dict[str, str] = {
    "n_gpu": "one process trains on model.device",
    "n_gpu_for_infer": "sampling shares the training process's model",
    "backbone": "sparring's own engine trains, not verl or trinity",
    "tinkerscript_mode": "no launcher modes",
    "swarm_mode": "episodes run in this process (or on Ray: runner.backend)",
    "swarm_mode_sample_collection_method": "a step waits for its whole batch",
    "max_env_worker": "episodes in flight: runner.max_concurrency",
    "gpu_memory_utilization": "no vLLM engine to size",
    "mini_batch_num": "one optimizer step per training step",
    "ppo_epochs": "one pass per batch",
    "max_prompt_length": "prompts are bounded by model.max_model_len",
    "max_response_length": "replies are bounded per turn by model.max_tokens",
    "lora_alpha": "not a setting here",
    "lora_target_modules": "adapters cover the engine's fixed set of projections",
    "lora_load_format": "adapters are saved as PEFT safetensors",
    "layered_summon": "no sharded weights to gather",
    "compute_madness_checklist": "not a check here",
    "base_yaml_config": "an AgentJet YAML file does not load: Job.load_yaml reads sparring's",
    "ensure_new_experiment": "a run folder holding a run is refused unless resumed or overwritten",
    "project_name": "runs are named by run_dir",
}
"""AgentJet argument -> why it does not apply to sparring's one-process engine (said in the note)."""

RUN_DIR_ARGUMENTS = ("experiment_dir", "experiment_name")
"""AgentJet's run location: `experiment_dir/experiment_name` becomes `run_dir`."""

AGENTJET_ARGUMENTS = frozenset(MAPPED) | frozenset(NOT_APPLYING) | frozenset(RUN_DIR_ARGUMENTS) | {"logging"}
"""Every AgentJet job argument a `Job` accepts beside its own."""


def agentjet_fields(fields: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Apply AgentJet's `arguments` to a Job's TuneConfig `fields` (in place); the note on those that do not apply.

    A mapped argument that contradicts the same field given in `model=` / `algorithm=` is a ConfigError naming
    both; AgentJet's `lora_rank=0` (full fine-tuning) is noted, since sparring always trains a LoRA adapter.
    `logging` is AgentJet's backend name ('tensorboard', 'wandb' with `project_name`; others are noted).
    """
    ignored = {name: value for name, value in arguments.items() if name in NOT_APPLYING and value is not None}
    for name, value in arguments.items():
        if name not in MAPPED or value is None:
            continue
        if name == "lora_rank" and value == 0:
            ignored[name] = value
            continue
        section, field = MAPPED[name]
        current = fields.get(section)
        values = dict(current) if current is not None else {}
        if current is not None and field in _given(current) and values[field] != value:
            raise ConfigError(f"{name}={value!r} contradicts {section}.{field}={values[field]!r}; give one of them")
        fields[section] = {**values, field: value}
    backend = arguments.get("logging")
    if backend == "tensorboard":
        fields["logging"] = {"tensorboard": True}
    elif backend == "wandb":
        fields["logging"] = {"wandb_project": arguments.get("project_name") or "sparring"}
        ignored.pop("project_name", None)  # it named the W&B project
    elif backend is not None:
        ignored["logging"] = backend
    run_dir = _run_dir(arguments.get("experiment_dir"), arguments.get("experiment_name"))
    if run_dir is not None:
        if fields.get("run_dir") is not None and fields["run_dir"] != run_dir:
            raise ConfigError(
                f"experiment_dir / experiment_name ({run_dir}) contradict run_dir={fields['run_dir']!r}; "
                "give one of them"
            )
        fields["run_dir"] = run_dir
    if not ignored:
        return None
    reasons = "; ".join(f"{name}={value!r} ({_reason(name)})" for name, value in ignored.items())
    return f"AgentJet job arguments that do not apply on this machine, accepted and not used: {reasons}"


def _given(section: Any) -> set[str]:
    """The fields a section value sets itself: a dict's keys, a config record's explicitly set fields."""
    return set(section) if isinstance(section, dict) else set(getattr(section, "model_fields_set", ()))


def _reason(name: str) -> str:
    if name == "lora_rank":
        return "sparring always trains a LoRA adapter; rank stays model.lora_rank"
    if name == "logging":
        return "metrics go to metrics.jsonl, TensorBoard or W&B: logging='tensorboard' | 'wandb'"
    return NOT_APPLYING[name]


def _run_dir(experiment_dir: Any, experiment_name: Any) -> str | None:
    if experiment_dir is None and experiment_name is None:
        return None
    parent = os.fspath(experiment_dir) if experiment_dir is not None else "saved_experiments"
    return os.path.join(parent, experiment_name) if experiment_name is not None else parent
