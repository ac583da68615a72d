"""A workflow's metrics are its own: its `error` is logged as given and counts as a failed episode (the failing-streak
stop included), and an episode in which no trainable agent spoke still logs the workflow's reward."""

import pytest

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, WorkflowOutput, tune
from sparring.logging import read_metrics
from sparring.trainer import EpisodesFailingError


async def handles_errors_gracefully(task, model, auxiliary_models):
    """The AgentScope tutorial's "Handle Errors Gracefully" pattern: the game broke before any trainable agent spoke."""
    return WorkflowOutput(reward=-0.1, metrics={"success": 0.0, "error": 1.0})


def test_a_workflow_reported_error_is_kept_counts_as_failed_and_stops_the_streak(tiny_model_dir, tmp_path):
    with pytest.raises(
        EpisodesFailingError, match=r"stopped after step 2.*first error: reported_error: the workflow reported error=1"
    ):
        tune(
            workflow_func=handles_errors_gracefully,
            train_dataset=DatasetConfig(tasks=[{"n": 1}, {"n": 2}], total_steps=4),
            model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=2),
            algorithm=AlgorithmConfig(group_size=2, batch_size=1, stop_after_failed_steps=2),
            run_dir=tmp_path / "run",
            logging=LoggingConfig(console=False, tensorboard=False),
        )
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2]
    for step in metrics:
        assert step["workflow/error"] == 1.0 and step["workflow/success"] == 0.0, "the workflow's own metrics, as given"
        assert step["episode/error_rate"] == 1.0 and step["episode/error_kind/reported_error"] == 1.0
        assert step["reward/mean"] == pytest.approx(-0.1), (
            "no trainable agent spoke, yet the workflow's reward is logged"
        )
