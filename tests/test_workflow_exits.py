"""A workflow cannot end the run: `sys.exit(...)` and `raise KeyboardInterrupt` in its code are error episodes, and a
thread it starts and never ends does not keep `sparring train` alive after training (it is named, not waited for)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, RunnerConfig, TunerModelConfig, WorkflowOutput, tune
from sparring.logging import read_metrics, read_rollouts


async def exits(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": "hi"}])
    if task["task_id"] == "sys.exit":
        sys.exit(3)
    if task["task_id"] == "KeyboardInterrupt":
        raise KeyboardInterrupt
    return WorkflowOutput(reward=float(sum(said.tokens) % 3))


def test_system_exit_and_keyboard_interrupt_from_a_workflow_are_error_episodes(tiny_model_dir, tmp_path):
    tasks = [{"task_id": "sys.exit"}, {"task_id": "KeyboardInterrupt"}, {"task_id": "healthy"}]
    result = tune(
        exits,
        train_dataset=DatasetConfig(tasks=tasks, total_steps=2, shuffle=False),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=2),
        algorithm=AlgorithmConfig(group_size=2, batch_size=3, learning_rate=1e-3, drop_zero_variance_groups=False),
        runner=RunnerConfig(error_reward=-0.5),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 2 and not result.interrupted and result.sampler_paths
    for metrics in read_metrics(tmp_path / "run"):
        assert metrics["episode/error_rate"] == pytest.approx(4 / 6) and metrics[
            "episode/error_kind/exception"
        ] == pytest.approx(4 / 6)
    rows = {row["task_id"]: row for row in read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl")}
    assert "SystemExit(3)" in rows["sys.exit"]["error"] and rows["sys.exit"]["reward"] == -0.5
    assert "KeyboardInterrupt()" in rows["KeyboardInterrupt"]["error"] and rows["KeyboardInterrupt"]["reward"] == -0.5
    assert rows["healthy"]["error"] is None


LEAVES_A_THREAD = """
import threading
from sparring import WorkflowOutput

async def leaves_a_thread(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": "hi"}])
    threading.Thread(target=threading.Event().wait, name=f"never-ends-{task['task_id']}").start()
    return WorkflowOutput(reward=float(sum(said.tokens) % 3))
"""


@pytest.mark.timeout(120)
def test_threads_a_workflow_leaves_running_are_named_and_do_not_keep_the_process_alive(tiny_model_dir, tmp_path):
    (tmp_path / "thread_workflow.py").write_text(LEAVES_A_THREAD)
    job = {
        "workflow": "thread_workflow:leaves_a_thread",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 3, "lora_rank": 2},
        "algorithm": {"group_size": 2, "batch_size": 1, "allow_nothing_trained": True},
        "train_dataset": {"tasks": [{"task_id": "a"}], "total_steps": 1},
        "logging": {"tensorboard": False, "console": False},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    finished = subprocess.run(
        [sys.executable, "-m", "sparring.cli", "train", str(tmp_path / "job.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert finished.returncode == 0, finished.stderr
    assert "done: 1 steps" in finished.stdout
    assert "not waited for: never-ends-a, never-ends-a" in finished.stderr, finished.stderr


def test_os_exit_ending_the_run_in_process_is_documented_with_the_runner_that_contains_it():
    """`os._exit` raises nothing to catch: in process it ends the run. The docs say so and name `runner: ray`, where
    it ends only the episode's worker (tests/test_ray_runner.py shows that)."""
    docs = (Path(__file__).parent.parent / "docs" / "run-outputs.md").read_text()
    said = docs[docs.index("`os._exit(...)`") - 200 :][:1200]
    assert "ends the whole run" in said and "runner.backend: ray" in said and "WorkerCrashedError" in said, said
