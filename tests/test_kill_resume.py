"""`sparring train` killed with SIGKILL at random moments resumes with `--resume` and loses at most one step a kill.

A run on the tiny model checkpoints every step. It is started as a real process, killed with
SIGKILL at moments drawn from a seeded generator (`KILLS` of them) -- mid-episode, mid-update, mid-checkpoint,
wherever the moment falls -- and resumed from its run directory each time, until a last resume
runs it to the end. At every kill the steps logged minus the steps checkpointed is 0 or 1 (the
step that finished but whose checkpoint did not), the checkpoint `latest.json` points at is
complete, and the resumed run continues from it: the finished run has every step logged exactly
once, in order, and its final checkpoint and adapter. The same holds with rollouts running ahead of
training (`max_staleness: 1`), killed with a rollout in flight.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from sparring.logging import read_metrics

KILLS = int(os.environ.get("SPARRING_KILLS", "2"))
"""Kills of each run: 2 in the suite (a trainer process started again each); `SPARRING_KILLS=10` samples more."""
TOTAL_STEPS = max(16, 5 * KILLS + 2)
SEED = 13
TASKS = [{"secret": secret} for secret in (3, 9, 12, 5, 7, 1)]


def write_job(folder: Path, tiny_model_dir: Path, max_staleness: int) -> Path:
    job = {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(folder / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 3, "lora_rank": 2},
        "algorithm": {
            "group_size": 2,
            "batch_size": 1,
            "learning_rate": 1e-3,
            "drop_zero_variance_groups": False,
            "max_staleness": max_staleness,
        },
        "runner": {"episode_timeout_s": 60},
        "checkpoints": {"interval_steps": 1},
        "train_dataset": {"tasks": TASKS, "total_steps": TOTAL_STEPS, "workflow_args": {"max_turns": 1}},
        "logging": {"tensorboard": False, "console": False, "save_rollouts": True},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [record["step"] for record in read_metrics(path)] if path.exists() else []


def step_seconds(run_dir: Path) -> float:
    """About how long this machine takes for a step: the fastest `time/step` so far (a run's first step also pays
    one-time imports, e.g. AgentScope's adapter, many times a tiny model's step), half again for logging and the
    checkpoint."""
    return min(record["time/step"] for record in read_metrics(run_dir / "metrics.jsonl")) * 1.5


def checkpointed_step(run_dir: Path) -> int:
    """The step of the checkpoint latest.json points at, after loading every file of it; 0 without one."""
    pointer = run_dir / "checkpoints" / "latest.json"
    if not pointer.exists():
        return 0
    directory = Path(json.loads(pointer.read_text())["path"])
    state = json.loads((directory / "trainer_state.json").read_text())
    assert set(torch.load(directory / "rng.pt", weights_only=False)) == {"torch", "numpy", "python"}
    for key, path in state["models"].items():
        model_state = json.loads((Path(path) / "state.json").read_text())
        assert model_state["optimizer_steps"] == state["step"], (
            f"{directory}: model {key} saved after {model_state['optimizer_steps']} optimizer steps"
        )
        assert load_file(Path(path) / "adapter" / "adapter_model.safetensors"), (
            f"{directory}: model {key} has no adapter weights"
        )
        assert torch.load(Path(path) / "optimizer.pt", weights_only=False)["optimizer"]["state"], (
            f"{directory}: model {key} has no optimizer state"
        )
    return int(state["step"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("max_staleness", [0, 1], ids=["on-policy", "rollouts-ahead"])
def test_sigkill_at_random_moments_then_resume_loses_at_most_one_step_a_kill(tmp_path, tiny_model_dir, max_staleness):
    rng = random.Random(SEED)
    run_dir = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    train = [sys.executable, "-m", "sparring.cli", "train"]
    command = [*train, str(write_job(tmp_path, tiny_model_dir, max_staleness))]
    started = time.monotonic()
    outcomes = []
    for kill in range(KILLS):
        steps_before = len(logged_steps(run_dir))
        with open(tmp_path / f"stderr-{kill}.txt", "w") as stderr:
            trainer = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            # Killed once it has trained two or three steps of its own (so every round makes progress), at a
            # random moment of the step after: sampling, the update, or writing the checkpoint.
            target, launched = steps_before + rng.randint(2, 3), time.monotonic()
            while len(logged_steps(run_dir)) < target:
                assert trainer.poll() is None, (
                    f"the trainer ended early:\n{(tmp_path / f'stderr-{kill}.txt').read_text()}"
                )
                assert time.monotonic() - launched < 120, f"kill {kill}: no new step within 120 s"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 1.2) * step_seconds(run_dir))
        finally:
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=30)
        logged, saved = logged_steps(run_dir), checkpointed_step(run_dir)
        outcomes.append(
            {
                "kill": kill,
                "logged": len(logged),
                "checkpointed": saved,
                "lost": len(logged) - saved,
                "exit": trainer.returncode,
            }
        )
        assert logged == list(range(1, len(logged) + 1)), f"kill {kill}: steps logged {logged}"
        assert 0 <= len(logged) - saved <= 1, f"kill {kill}: {len(logged)} steps logged, checkpoint at step {saved}"
        command = [*train, "--resume", str(run_dir)]

    assert all(outcome["checkpointed"] < TOTAL_STEPS for outcome in outcomes), outcomes
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert f"done: {TOTAL_STEPS} steps" in finished.stdout
    assert logged_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))
    assert checkpointed_step(run_dir) == TOTAL_STEPS
    final_adapter = next(
        line.split(": ", 1)[1].strip() for line in finished.stdout.splitlines() if line.strip().startswith("policy: ")
    )
    assert load_file(Path(final_adapter) / "adapter_model.safetensors")
    print(f"kills: {outcomes}; whole test {time.monotonic() - started:.1f} s")
