"""`sparring train` stopped by SIGINT or SIGTERM checkpoints its last completed step, exits 130 / 143, and resumes
into the run it would have been.

A seeded tiny-model run is stopped with a signal at a moment drawn from a seeded generator (mid-rollout,
mid-update or mid-checkpoint, wherever it falls), with rollouts on-policy and running ahead (`max_staleness: 1`).
Each stop must end the process within 10 s with the signal's exit code, one line naming the resume command, no
traceback, no "final" adapter, and a checkpoint at exactly the steps logged (nothing lost, nothing ahead). The run
resumed to its end must then hold the same final adapter, tensor for tensor, as the same run never interrupted.
`StopSignals` itself: a signal cancels what the run awaits and the handlers are put back; a second signal ends the
process even while the event loop is blocked.
"""

from __future__ import annotations

import asyncio
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
from test_kill_resume import checkpointed_step, logged_steps, write_job

from sparring.logging import read_metrics

ROUNDS = int(os.environ.get("SPARRING_STOP_ROUNDS", "1"))
"""Stops of each signal per run: 1 in the suite; `SPARRING_STOP_ROUNDS=10` measures 10 SIGINT and 10 SIGTERM."""
TOTAL_STEPS = max(8, 6 * ROUNDS + 2)
SEED = 29
TRAIN = [sys.executable, "-m", "sparring.cli", "train"]
WORKFLOW = """
from sparring import WorkflowOutput

async def token_sum(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": f"pick {task['secret']}"}])
    return WorkflowOutput(reward=float(sum(said.tokens) % 3))
"""
"""A reward that varies with what the tiny model samples, so every step trains and a wrong resume shows in the
weights."""


def short_job(folder: Path, tiny_model_dir: Path, max_staleness: int) -> Path:
    path = write_job(folder, tiny_model_dir, max_staleness)
    (folder / "token_sum_workflow.py").write_text(WORKFLOW)
    job = yaml.safe_load(path.read_text())
    job["workflow"] = "token_sum_workflow:token_sum"
    job["train_dataset"]["total_steps"] = TOTAL_STEPS
    job["algorithm"]["learning_rate"] = 1e-2
    path.write_text(yaml.safe_dump(job))
    return path


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
    }


def final_adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    (weights,) = run_dir.glob("checkpoints/*/sampler_weights/final/adapter_model.safetensors")
    return load_file(weights)


def stop_once(
    command: list[str], env: dict, run_dir: Path, signum: int, rng: random.Random, log: Path
) -> subprocess.CompletedProcess:
    """Start `command`, let it log one or two steps of its own, send `signum` at a random moment of the step after, and
    wait for it to end (within 10 s)."""
    steps_before = len(logged_steps(run_dir))
    with open(log, "w") as stderr:
        trainer = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        launched, logged_at = time.monotonic(), []
        target = steps_before + rng.randint(2, 3)
        while len(logged_steps(run_dir)) < target:
            if len(logged_steps(run_dir)) > steps_before + len(logged_at):
                logged_at.append(time.monotonic())
            assert trainer.poll() is None, f"the trainer ended early:\n{log.read_text()}"
            assert time.monotonic() - launched < 120, "no step within 120 s"
            time.sleep(0.002)
        wall_step = time.monotonic() - logged_at[-1]  # the step just logged, rollout to checkpoint
        time.sleep(rng.uniform(0.0, 1.0) * wall_step)
        trainer.send_signal(signum)
        sent = time.monotonic()
        stdout, _ = trainer.communicate(timeout=30)
        assert time.monotonic() - sent < 10, (
            f"{signal.Signals(signum).name} took {time.monotonic() - sent:.1f} s to stop the run"
        )
    finally:
        if trainer.poll() is None:
            trainer.kill()
    return subprocess.CompletedProcess(command, trainer.returncode, stdout, log.read_text())


@pytest.mark.timeout(300 * ROUNDS)
@pytest.mark.parametrize("max_staleness", [0, 1], ids=["on-policy", "rollouts-ahead"])
def test_sigint_and_sigterm_checkpoint_the_last_step_and_resume_into_the_uninterrupted_run(
    tmp_path, tiny_model_dir, max_staleness
):
    rng = random.Random(SEED + max_staleness)
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    reference = subprocess.run(
        [*TRAIN, str(short_job(reference_dir, tiny_model_dir, max_staleness))],
        env=environment(reference_dir),
        capture_output=True,
        text=True,
        timeout=120 * ROUNDS,
    )
    assert reference.returncode == 0, reference.stderr

    run_dir = tmp_path / "run"
    command, env = [*TRAIN, str(short_job(tmp_path, tiny_model_dir, max_staleness))], environment(tmp_path)
    for round, signum in enumerate((signal.SIGINT, signal.SIGTERM) * ROUNDS):
        stopped = stop_once(command, env, run_dir, signum, rng, tmp_path / f"stderr-{round}.txt")
        logged, saved = logged_steps(run_dir), checkpointed_step(run_dir)
        assert stopped.returncode == 128 + signum, stopped.stderr
        assert "Traceback" not in stopped.stderr and "never retrieved" not in stopped.stderr, stopped.stderr
        assert f"continue with: sparring train --resume {run_dir}" in stopped.stderr.splitlines()[-1], stopped.stderr
        assert logged == list(range(1, len(logged) + 1)) and saved == len(logged), (
            f"{len(logged)} steps logged, checkpoint at step {saved}"
        )
        assert not list(run_dir.glob("checkpoints/*/sampler_weights/final")), "an interrupted run wrote a final adapter"
        command = [*TRAIN, "--resume", str(run_dir)]

    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert logged_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))
    assert sum(record["tokens/trained"] for record in read_metrics(run_dir / "metrics.jsonl")) > 0, (
        "nothing trained: the comparison below would be void"
    )
    expected, got = final_adapter(reference_dir / "run"), final_adapter(run_dir)
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), (
            f"{name}: the resumed run's final adapter differs from the uninterrupted run's"
        )


def test_a_signal_cancels_what_is_awaited_and_the_handlers_are_put_back():
    from sparring.trainer.safeguards import Stopped, StopSignals

    before = signal.getsignal(signal.SIGTERM)
    unwound = []

    async def rollout():
        try:
            await asyncio.sleep(60)
        finally:
            unwound.append(True)

    async def main():
        stop = StopSignals()
        assert stop.install()
        try:
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)
            with pytest.raises(Stopped, match="SIGTERM"):
                await stop.cancelling(rollout())
            assert stop.signum == signal.SIGTERM and unwound == [True]
            with pytest.raises(Stopped):
                await stop.cancelling(rollout())  # once stopped, nothing more starts
            assert unwound == [True]
        finally:
            stop.restore()

    asyncio.run(main())
    assert signal.getsignal(signal.SIGTERM) == before


SIGNALLED_TWICE = """
import asyncio, os, signal, time
from sparring.trainer.safeguards import StopSignals

async def main():
    stop = StopSignals()
    stop.install()
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # the loop is blocked (a model loading): the second signal must still end the process
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)

asyncio.run(main())
"""


def test_a_second_signal_quits_at_once_even_while_the_loop_is_blocked():
    ran = subprocess.run([sys.executable, "-c", SIGNALLED_TWICE], capture_output=True, text=True, timeout=20)
    assert ran.returncode == 130, ran.stderr
    assert "SIGINT again: quitting at once" in ran.stderr
