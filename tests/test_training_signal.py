"""A run that trains nothing says so: a warning per step naming the cause, and at the end an error, no final adapter
(`tune()` raises, `sparring train` exits 1 with one line); `algorithm.allow_nothing_trained` makes it a dry run."""

import logging

import pytest
import yaml
from typer.testing import CliRunner

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, WorkflowOutput, tune
from sparring.cli import app
from sparring.trainer import NothingTrainedError

TASKS = [{"topic": f"topic {i}"} for i in range(2)]
QUIET = LoggingConfig(console=False, tensorboard=False)


async def same_reward_every_time(task, model, auxiliary_models):
    await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=0.0)


async def nobody_trainable_speaks(task, model, auxiliary_models):
    return WorkflowOutput(reward=1.0)


def run(tiny_model_dir, tmp_path, workflow, **algorithm):
    return tune(
        workflow_func=workflow,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=2),
        algorithm=AlgorithmConfig(group_size=2, batch_size=1, **algorithm),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )


@pytest.mark.parametrize(
    "workflow, cause",
    [
        (same_reward_every_time, "every group's episodes got the same reward (1 group(s); rewards seen: 0)"),
        (nobody_trainable_speaks, "no trainable agent spoke"),
    ],
)
def test_a_run_that_trains_nothing_warns_each_step_and_raises_without_a_final_adapter(
    tiny_model_dir, tmp_path, caplog, workflow, cause
):
    with (
        caplog.at_level(logging.WARNING, logger="sparring"),
        pytest.raises(NothingTrainedError, match="no step of this run trained a token") as raised,
    ):
        run(tiny_model_dir, tmp_path, workflow)
    assert cause in str(raised.value) and "allow_nothing_trained" in str(raised.value)
    warnings = [record.getMessage() for record in caplog.records if "trained no token" in record.getMessage()]
    assert len(warnings) == 2 and all(cause in warning for warning in warnings)
    assert (tmp_path / "run" / "checkpoints" / "latest.json").exists() and not list(
        tmp_path.glob("run/**/sampler_weights/final")
    )


def test_a_deliberate_dry_run_ends_normally_and_quietly(tiny_model_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sparring"):
        result = run(tiny_model_dir, tmp_path, same_reward_every_time, allow_nothing_trained=True)
    assert result.steps == 2 and result.sampler_paths and list(tmp_path.glob("run/**/sampler_weights/final"))
    assert not [record for record in caplog.records if "trained no token" in record.getMessage()]


def test_sparring_train_that_trains_nothing_exits_1_with_one_line(tiny_model_dir, tmp_path):
    config = {
        "workflow": "tests.test_training_signal:same_reward_every_time",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 2},
        "algorithm": {"group_size": 2, "batch_size": 1},
        "train_dataset": {"tasks": TASKS, "total_steps": 1},
        "logging": {"tensorboard": False, "console": False},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["--quiet", "train", str(path)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no step of this run trained a token")
