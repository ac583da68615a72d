"""Two training steps of a workflow whose agents reach the policy through an endpoint, on the tiny model.

`train_two_steps(workflow, model_dir, run_dir, topics)` is the run the client-shape tests share (the chat
completions SDK, the Responses API, the OpenAI Agents SDK): 2 steps of 2 tasks x 2 episodes, every group trained
(their rewards are random), nothing saved or evaluated; it returns every rollout row, and fails if any
episode errored or the run did not make its 2 steps.
"""

from __future__ import annotations

from pathlib import Path

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    TunerModelConfig,
    tune,
)
from sparring.logging import read_rollouts


def train_two_steps(workflow, model_dir: Path, run_dir: Path, topics: list[str]):
    result = tune(
        workflow_func=workflow,
        train_dataset=DatasetConfig(tasks=[{"topic": topic} for topic in topics], total_steps=2),
        model=TunerModelConfig(model_path=str(model_dir), max_tokens=6, lora_rank=4),
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=1e-3, drop_zero_variance_groups=False),
        runner=RunnerConfig(episode_timeout_s=120),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=run_dir,
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 2
    rows = [row for step in (1, 2) for row in read_rollouts(run_dir / "rollouts" / f"step_{step}.jsonl")]
    assert not [row["error"] for row in rows if row.get("error")]
    return rows
