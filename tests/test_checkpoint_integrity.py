"""Checkpoints verify themselves: every damaged variant of a tiny-model run's checkpoint is refused on resume in one
line
naming the bad file (with its manifest, and the content checks alone without one), a NaN produced by an optimizer step
never reaches a saved adapter, temporary folders of killed saves are cleaned when a run starts, retention never
keeps a checkpoint whose weights are gone, and `checkpoints.keep` keeps only the newest (which still resume)."""

import itertools
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
from sparring.trainer import CheckpointError, NonFiniteWeightsError, load_config_file, run_training
from sparring.trainer.checkpoints import latest_checkpoint, verify_checkpoint
from sparring.trainer.safeguards import MANIFEST

QUIET = LoggingConfig(console=False, tensorboard=False)


async def token_sum(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["prompt"]}])
    return WorkflowOutput(reward=float(sum(said.tokens) % 3))


def train(tiny_model_dir, run_dir: Path, total_steps: int, workflow=token_sum, keep=None, **algorithm):
    settings = {
        "group_size": 2,
        "batch_size": 2,
        "learning_rate": 1e-2,
        "drop_zero_variance_groups": False,
        **algorithm,
    }
    return tune(
        workflow,
        train_dataset=DatasetConfig(tasks=[{"prompt": f"say {i}"} for i in range(4)], total_steps=total_steps),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=2),
        algorithm=AlgorithmConfig(**settings),
        checkpoints=CheckpointsConfig(interval_steps=1, keep=keep),
        run_dir=run_dir,
        logging=QUIET,
    )


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("integrity") / "run"
    train(tiny_model_dir, folder, total_steps=2)
    return folder


def model_state(checkpoint: Path) -> Path:
    (path,) = json.loads((checkpoint / "trainer_state.json").read_text())["models"].values()
    return Path(path)


def nan_adapter(path: Path) -> None:
    tensors = load_file(path)
    save_file({name: torch.full_like(value, float("nan")) for name, value in tensors.items()}, path)


def scaled_adapter(path: Path) -> None:
    save_file({name: value * 1e6 for name, value in load_file(path).items()}, path)


def nan_optimizer(path: Path) -> None:
    saved = torch.load(path, weights_only=False)
    for entry in saved["optimizer"]["state"].values():
        entry["exp_avg"].fill_(float("nan"))
    torch.save(saved, path)


def wrong_steps(path: Path) -> None:
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "optimizer_steps": state["optimizer_steps"] + 3}))


DAMAGE = {
    "zero-byte rng.pt": ("rng.pt", lambda path: path.write_bytes(b"")),
    "truncated adapter": ("adapter/adapter_model.safetensors", lambda path: path.write_bytes(path.read_bytes()[:100])),
    "NaN adapter": ("adapter/adapter_model.safetensors", nan_adapter),
    "adapter scaled 1e6": ("adapter/adapter_model.safetensors", scaled_adapter),
    "garbage adapter_config.json": ("adapter/adapter_config.json", lambda path: path.write_text("{not json")),
    "NaN optimizer state": ("optimizer.pt", nan_optimizer),
    "wrong optimizer_steps": ("state.json", wrong_steps),
    "missing optimizer.pt": ("optimizer.pt", lambda path: path.unlink()),
    "truncated optimizer.pt": ("optimizer.pt", lambda path: path.write_bytes(path.read_bytes()[:100])),
    "zero-byte adapter": ("adapter/adapter_model.safetensors", lambda path: path.write_bytes(b"")),
    "missing adapter_config.json": ("adapter/adapter_config.json", lambda path: path.unlink()),
    "garbage state.json": ("state.json", lambda path: path.write_text("{not json")),
}
"""Damage -> (the file it damages, relative to the model's training state; rng.pt is the step folder's), how."""
CAUGHT_WITHOUT_MANIFEST = [damage for damage in DAMAGE if damage != "adapter scaled 1e6"]
"""What the content checks alone refuse (an adapter scaled 1e6 is finite and well-formed: only its manifest tells)."""


@pytest.mark.parametrize(
    "damage, with_manifest",
    [(damage, True) for damage in DAMAGE] + [(damage, False) for damage in CAUGHT_WITHOUT_MANIFEST],
    ids=[f"{damage}-manifest" for damage in DAMAGE]
    + [f"{damage}-content-checks-only" for damage in CAUGHT_WITHOUT_MANIFEST],
)
def test_every_damaged_checkpoint_is_refused_naming_the_file(run_dir, damage, with_manifest):
    checkpoint = latest_checkpoint(run_dir)
    verify_checkpoint(checkpoint)  # intact, it passes
    relative, harm = DAMAGE[damage]
    target = checkpoint / relative if relative == "rng.pt" else model_state(checkpoint) / relative
    originals = {path: path.read_bytes() for path in (target, checkpoint / MANIFEST)}
    try:
        if not with_manifest:
            (checkpoint / MANIFEST).unlink()
        harm(target)
        with pytest.raises(CheckpointError) as refused:
            verify_checkpoint(checkpoint)
        assert str(target) in str(refused.value) and "\n" not in str(refused.value), refused.value
    finally:
        for path, content in originals.items():
            path.write_bytes(content)


@pytest.mark.timeout(120)
def test_sparring_train_resume_refuses_a_damaged_checkpoint_in_one_line(run_dir):
    rng = latest_checkpoint(run_dir) / "rng.pt"
    original = rng.read_bytes()
    rng.write_bytes(b"")
    try:
        resumed = subprocess.run(
            [sys.executable, "-m", "sparring.cli", "train", "--resume", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=100,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parent)},
        )
    finally:
        rng.write_bytes(original)
    assert resumed.returncode == 1, resumed.stderr
    lines = [line for line in resumed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(rng) in lines[0] and "0 bytes" in lines[0], (
        resumed.stderr
    )


EPISODES_PLAYED = itertools.count()


async def overflowing(task, model, auxiliary_models):
    """Healthy for the first step's 4 episodes; then rewards near float32's limit overflow the loss into NaN weights."""
    said = await model([{"role": "user", "content": task["prompt"]}])
    scale = 1.0 if next(EPISODES_PLAYED) < 4 else 3e38
    return WorkflowOutput(reward=scale * float(sum(said.tokens) % 3))


def test_a_step_that_makes_the_weights_nan_is_named_and_never_saved(tiny_model_dir, tmp_path):
    with pytest.raises(NonFiniteWeightsError, match=r"^step \d+: the optimizer step left NaN") as stopped:
        train(tiny_model_dir, tmp_path / "run", total_steps=4, workflow=overflowing, normalize_advantages_by_std=False)
    failed_step = int(str(stopped.value).split(":")[0].removeprefix("step "))
    assert failed_step > 1
    for path in (tmp_path / "run" / "checkpoints").rglob("*.safetensors"):
        assert all(torch.isfinite(value).all() for value in load_file(path).values()), path
    assert not list((tmp_path / "run").rglob("final")), "a failed run wrote a final adapter"
    assert verify_checkpoint(latest_checkpoint(tmp_path / "run"))["step"] == failed_step - 1


def test_a_run_cleans_temporary_files_of_killed_saves_and_keeps_only_resumable_checkpoints(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train(tiny_model_dir, run, total_steps=5, max_staleness=1)
    checkpoints = sorted((run / "checkpoints").glob("step_*"))
    assert checkpoints and len(checkpoints) < 5, checkpoints  # those whose older weights were deleted went with them
    for checkpoint in checkpoints:
        verify_checkpoint(checkpoint)  # every one kept resumes on its own
    leftovers = [
        run / "checkpoints" / ".latest.json.123.456.tmp",
        run / "checkpoints" / "lora-0" / "weights" / ".run-step-000006.abc",
    ]
    leftovers[0].write_text("{")
    leftovers[1].mkdir(parents=True)
    run_training(load_config_file(run / "config.yaml"), workflow=token_sum, resume=str(run))
    assert not any(path.exists() for path in leftovers)


def test_keep_checkpoints_deletes_older_checkpoints_and_their_training_states_and_the_run_still_resumes(
    tiny_model_dir, tmp_path
):
    run = tmp_path / "run"
    train(tiny_model_dir, run, total_steps=4, keep=2)
    assert [path.name for path in sorted((run / "checkpoints").glob("step_*"))] == ["step_000003", "step_000004"]
    states = model_state(latest_checkpoint(run)).parent
    assert sorted(path.name for path in states.iterdir()) == ["run-step-000003", "run-step-000004"]
    run_training(
        load_config_file(run / "config.yaml", ["train_dataset.total_steps=5"]), workflow=token_sum, resume=str(run)
    )
    assert [path.name for path in sorted((run / "checkpoints").glob("step_*"))] == ["step_000004", "step_000005"]
    assert verify_checkpoint(latest_checkpoint(run))["step"] == 5
