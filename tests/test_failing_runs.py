"""Runs in which every episode fails, on the tiny model: steps in which every episode fails warn and stop the run
after a checkpoint (the failure streak, and a healthy step ending it), a run that trained nothing raises its first
error and writes no final adapter (`sparring train` exits 1 with it), and Ctrl-C during a blocked step still
checkpoints and stops."""

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    LoggingConfig,
    RunnerConfig,
    TunerModelConfig,
    tune,
)
from sparring.cli import app
from sparring.logging import read_metrics
from sparring.rollout import Episode
from sparring.rollout.player import CANCEL_GRACE_S
from sparring.trainer import EpisodesFailingError
from sparring.trainer.safeguards import FailureStreak

TIMEOUT_S = 1.5
QUIET = LoggingConfig(console=False, tensorboard=False)


def model_config(tiny_model_dir):
    return TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4)


async def always_raises(task, model, auxiliary_models):
    raise RuntimeError(f"broken workflow on {task['task_id']}")


def test_steps_in_which_every_episode_fails_warn_and_stop_the_run_after_a_checkpoint(tiny_model_dir, tmp_path, caplog):
    tasks = [{"task_id": str(i)} for i in range(4)]
    algorithm = AlgorithmConfig(group_size=2, batch_size=2, stop_after_failed_steps=2)
    runner = RunnerConfig(episode_timeout_s=TIMEOUT_S, error_reward=-0.25)
    with (
        caplog.at_level(logging.WARNING, logger="sparring.trainer.pipeline"),
        pytest.raises(EpisodesFailingError) as stopped,
    ):
        tune(
            always_raises,
            train_dataset=DatasetConfig(tasks=tasks, total_steps=5),
            model=model_config(tiny_model_dir),
            algorithm=algorithm,
            runner=runner,
            run_dir=tmp_path / "run",
            logging=QUIET,
        )
    assert (
        "stopped after step 2" in str(stopped.value)
        and "exception in 4 of 4 episodes" in str(stopped.value)
        and "broken workflow" in str(stopped.value)
    )
    assert "first error: exception: RuntimeError: broken workflow on" in str(stopped.value) and not list(
        (tmp_path / "run").rglob("final")
    )
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2] and [m["reward/mean"] for m in metrics] == [
        -0.25,
        -0.25,
    ]  # the error reward, not 0.0
    warnings = [record.message for record in caplog.records if "every episode of this step failed" in record.message]
    assert len(warnings) == 2 and "commonest error: exception" in warnings[0]
    latest = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())
    assert (
        latest["path"].endswith("step_000002")
        and (tmp_path / "run" / "checkpoints" / "step_000002" / "trainer_state.json").exists()
    )


def test_a_healthy_step_ends_the_failure_streak():
    failed = [Episode(task={}, group=0, timelines=[], rewards={}, error="x", error_kind="exception")] * 2
    healthy = [Episode(task={}, group=0, timelines=[], rewards={}), failed[0]]
    streak = FailureStreak(limit=2)
    assert streak.observe(failed) and not streak.exhausted
    assert streak.observe(healthy) is None and streak.steps == 0
    streak.observe(failed)
    streak.observe(failed)
    assert streak.exhausted and FailureStreak(limit=0, steps=99).exhausted is False


def test_a_run_whose_every_step_failed_raises_the_first_error_and_writes_no_final_adapter(tiny_model_dir, tmp_path):
    tasks = [{"task_id": str(i)} for i in range(4)]
    algorithm = AlgorithmConfig(group_size=2, batch_size=2, stop_after_failed_steps=3)
    runner = RunnerConfig(episode_timeout_s=TIMEOUT_S)
    with pytest.raises(EpisodesFailingError) as failed:
        tune(
            always_raises,
            train_dataset=DatasetConfig(tasks=tasks, total_steps=2, shuffle=False),
            model=model_config(tiny_model_dir),
            algorithm=algorithm,
            runner=runner,
            run_dir=tmp_path / "run",
            logging=QUIET,
        )
    message = str(failed.value)
    assert "every episode failed in every step this run took (2, up to step 2): nothing was trained" in message
    assert (
        "first error: exception: RuntimeError: broken workflow on 0;" in message
        and "no final adapter written" in message
    )
    assert not list((tmp_path / "run").rglob("final"))
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2]


def test_sparring_train_exits_1_with_the_first_error_when_every_episode_failed(tiny_model_dir, tmp_path):
    (tmp_path / "broken.py").write_text(
        "async def broken(task, model, auxiliary_models):\n    raise KeyError(f\"no field {task['n']}\")\n"
    )
    (tmp_path / "tasks.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(2)))
    config = {
        "workflow": f"{tmp_path / 'broken.py'}:broken",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 4},
        "algorithm": {"group_size": 2, "batch_size": 2},
        "train_dataset": {"path": str(tmp_path / "tasks.jsonl"), "total_steps": 1, "shuffle": False},
        "logging": {"tensorboard": False, "console": False},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["train", str(tmp_path / "job.yaml")])
    assert result.exit_code == 1, result.output
    assert (
        result.output.startswith("error: every episode failed")
        and "first error: exception: KeyError: 'no field 0'" in result.output
    )
    assert not list((tmp_path / "run").rglob("final"))


CTRL_C_SCRIPT = """
import asyncio, json, sys, time
from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, RunnerConfig, TunerModelConfig, WorkflowOutput, tune

async def workflow(task, model, auxiliary_models):
    await model([{"role": "user", "content": "hi"}])
    if task["task_id"] == "blocks":
        print("blocking", flush=True)
        time.sleep(600)
    return WorkflowOutput(reward=1.0)

tasks = [{"task_id": "blocks"}, {"task_id": "healthy"}]
result = tune(workflow, train_dataset=DatasetConfig(tasks=tasks, total_steps=3, shuffle=False),
              model=TunerModelConfig(model_path=sys.argv[1], max_tokens=4, lora_rank=4),
              algorithm=AlgorithmConfig(group_size=1, batch_size=2), runner=RunnerConfig(episode_timeout_s=1.0),
              run_dir=sys.argv[2],
              logging=LoggingConfig(console=False, tensorboard=False))
print(json.dumps({"interrupted": result.interrupted, "steps": result.steps, "final": result.sampler_paths}), flush=True)
"""


@pytest.mark.timeout(120)
def test_ctrl_c_during_a_blocked_step_still_checkpoints_and_stops(tiny_model_dir, tmp_path):
    script = tmp_path / "blocked_run.py"
    script.write_text(CTRL_C_SCRIPT)
    run = subprocess.Popen(
        [sys.executable, str(script), str(tiny_model_dir), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert run.stdout.readline().strip() == "blocking"
        time.sleep(0.3)
        run.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    # The blocked episode is interrupted at its timeout + grace; then the interrupt stops the run.
    assert run.returncode == 0 and time.monotonic() - interrupted < 1.0 + CANCEL_GRACE_S + 20, err
    assert json.loads(out.splitlines()[-1]) == {
        "interrupted": True,
        "steps": 0,
        "final": {},
    }  # nothing trained: no final adapter
    latest = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())
    assert latest["path"].endswith("step_000000")
