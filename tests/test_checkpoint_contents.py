"""What a checkpoint holds is checked before a resume trains on it, even when its manifest matches: an adapter tensor
of the wrong shape (against its config or the model), an optimizer state of another adapter and a malformed data
position are each refused in one line naming the file, not a traceback from PEFT, torch or the task stream. A torn
last line of metrics.jsonl is repaired on resume from the step's record the checkpoint kept, and said."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    LoggingConfig,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.logging import read_metrics
from sparring.trainer import CheckpointError, load_config_file, run_training
from sparring.trainer.checkpoints import latest_checkpoint, verify_checkpoint
from sparring.trainer.safeguards import write_manifest


async def token_sum(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["prompt"]}])
    return WorkflowOutput(reward=float(sum(said.tokens) % 7))


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    return one_step_run(tmp_path_factory.mktemp("contents") / "run", tiny_model_dir, group_size=4)


def one_step_run(folder, tiny_model_dir, group_size: int):
    """A one-step run of `token_sum` on the tiny model, a checkpoint after its step; returns its folder."""
    settings = {"group_size": group_size, "batch_size": 2, "allow_nothing_trained": True}
    tune(
        token_sum,
        train_dataset=DatasetConfig(tasks=[{"prompt": f"say {i}"} for i in range(4)], total_steps=1),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=2),
        algorithm=AlgorithmConfig(learning_rate=1e-2, drop_zero_variance_groups=False, **settings),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=folder,
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    return folder


def model_state(checkpoint: Path) -> Path:
    (path,) = json.loads((checkpoint / "trainer_state.json").read_text())["models"].values()
    return Path(path)


def resave(path: Path, change) -> None:
    tensors = load_file(path)
    name = sorted(name for name in tensors if ".lora_A." in name)[0]
    tensors[name] = change(tensors[name])
    save_file(tensors, path)


def rank_plus_one(path: Path) -> None:
    resave(path, lambda value: torch.zeros(value.shape[0] + 1, value.shape[1]))


def narrower_input(path: Path) -> None:
    """Right rank, wrong width: only the model can tell."""
    resave(path, lambda value: torch.zeros(value.shape[0], value.shape[1] // 2))


def optimizer_of_another_adapter(path: Path) -> None:
    saved = torch.load(path, weights_only=False)
    assert saved["optimizer"] is not None, "the run made no optimizer step"
    for entry in saved["optimizer"]["state"].values():
        entry["exp_avg"] = torch.zeros(7, 7)
    torch.save(saved, path)


def edit_data(change):
    def damage(path: Path) -> None:
        state = json.loads(path.read_text())
        state["data"] = change(state["data"])
        path.write_text(json.dumps(state))

    return damage


DAMAGE = {
    "adapter of rank+1": ("adapter/adapter_model.safetensors", rank_plus_one),
    "adapter narrower than the model": ("adapter/adapter_model.safetensors", narrower_input),
    "optimizer of another adapter": ("optimizer.pt", optimizer_of_another_adapter),
    "data position missing fields": ("trainer_state.json", edit_data(lambda data: {"epoch": "x", "position": 2})),
    "data position out of range": ("trainer_state.json", edit_data(lambda data: {**data, "position": 99})),
    "data position negative": ("trainer_state.json", edit_data(lambda data: {**data, "epoch": -1})),
    "data position not an object": ("trainer_state.json", edit_data(lambda data: [1, 2])),
}
"""Damage -> (the file, relative to the model's training state; trainer_state.json is the step folder's), how."""
SEEN_ONLY_WITH_THE_MODEL = {"adapter narrower than the model"}


def damaged(run_dir: Path, damage: str):
    """Damage the latest checkpoint and rewrite its manifest to match (the contents are all that is wrong); returns
    the damaged file and a function that puts everything back."""
    checkpoint = latest_checkpoint(run_dir)
    relative, harm = DAMAGE[damage]
    target = checkpoint / relative if relative == "trainer_state.json" else model_state(checkpoint) / relative
    manifest = checkpoint / "manifest.json"
    originals = {path: path.read_bytes() for path in (target, manifest)}
    harm(target)
    sources = [checkpoint / "trainer_state.json", checkpoint / "rng.pt", model_state(checkpoint)]
    write_manifest(checkpoint, run_dir, sources)

    def restore() -> None:
        for path, content in originals.items():
            path.write_bytes(content)

    return target, restore


@pytest.mark.parametrize("damage", [damage for damage in DAMAGE if damage not in SEEN_ONLY_WITH_THE_MODEL])
def test_damaged_contents_under_a_matching_manifest_are_refused_naming_the_file(run_dir, damage):
    verify_checkpoint(latest_checkpoint(run_dir))  # intact, it passes
    target, restore = damaged(run_dir, damage)
    try:
        with pytest.raises(CheckpointError) as refused:
            verify_checkpoint(latest_checkpoint(run_dir))
    finally:
        restore()
    assert str(target) in str(refused.value) and "\n" not in str(refused.value), refused.value


@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "damage", ["adapter of rank+1", "adapter narrower than the model", "data position missing fields"]
)
def test_sparring_train_resume_refuses_damaged_contents_in_one_line(run_dir, damage):
    target, restore = damaged(run_dir, damage)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parent)}
    command = [sys.executable, "-m", "sparring.cli", "train", "--resume", str(run_dir), "--steps", "2"]
    try:
        resumed = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    finally:
        restore()
    assert resumed.returncode == 1, resumed.stderr
    lines = [line for line in resumed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), resumed.stderr
    assert str(target) in lines[0], resumed.stderr


def test_a_torn_last_metrics_line_is_repaired_on_resume_from_the_checkpoint_and_said(tiny_model_dir, tmp_path, caplog):
    run = one_step_run(tmp_path / "run", tiny_model_dir, group_size=2)
    metrics = run / "metrics.jsonl"
    (logged,) = read_metrics(metrics)
    metrics.write_text(metrics.read_text()[: len(metrics.read_text()) // 2])  # the step's line, cut mid-write
    with caplog.at_level("WARNING", logger="sparring.logging.metrics"):
        config = load_config_file(run / "config.yaml", ["train_dataset.total_steps=2"])
        run_training(config, workflow=token_sum, resume=str(run))
    records = read_metrics(metrics)
    assert [record["step"] for record in records] == [1, 2] and records[0] == logged
    said = [record.message for record in caplog.records if "torn" in record.message]
    assert len(said) == 1 and "wrote step 1's metrics back from the checkpoint" in said[0], said
