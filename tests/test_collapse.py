"""Collapse is visible: per step the sampled tokens' entropy estimate and the share of distinct actions per group are
logged, and a run whose groups keep tying is warned about (every 3 steps in a row with over half of them tied)."""

import json
import math

import pytest

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, WorkflowOutput, tune
from sparring.algorithms import collapse_metrics
from sparring.rollout import Episode, Timeline
from sparring.trainer.safeguards import TrainingSignal


def acted(group: int, agent: str, sampled: list[int], logprobs: list[float], role: str | None = None) -> Episode:
    """One episode where `agent` sampled `sampled` (with `logprobs`) after a two-token prompt."""
    timeline = Timeline(
        agent=agent,
        model="policy",
        tokens=[7, 8, *sampled],
        loss_mask=[0, 0] + [1] * len(sampled),
        logprobs=[0.0, 0.0, *logprobs],
    )
    return Episode(
        task={}, group=group, timelines=[timeline], rewards={agent: 0.0}, roles={agent: role} if role else {}
    )


def test_entropy_is_the_mean_negative_logprob_of_sampled_tokens_and_distinct_share_counts_actions_per_group():
    episodes = [
        acted(0, "p", [1, 2], [-0.5, -1.5]),
        acted(0, "p", [1, 2], [-0.5, -1.5]),
        acted(0, "p", [3], [-2.0]),
        acted(0, "p", [1, 2], [-0.5, -1.5]),
        acted(1, "p", [4], [-1.0]),
        acted(1, "p", [5], [-3.0]),
    ]
    metrics = collapse_metrics(episodes)
    assert metrics["collapse/entropy"] == pytest.approx((3 * (0.5 + 1.5) + 2.0 + 1.0 + 3.0) / 9)  # 9 sampled tokens
    assert metrics["collapse/distinct_share"] == pytest.approx((2 / 4 + 2 / 2) / 2)
    # Roles split a group as the advantages do: two roles that each act alike are two all-alike groups.
    by_role = [
        acted(0, "wolf", [1], [-0.1], role="wolf"),
        acted(0, "wolf", [1], [-0.1], role="wolf"),
        acted(0, "seer", [2], [-0.1], role="seer"),
        acted(0, "seer", [2], [-0.1], role="seer"),
    ]
    assert collapse_metrics(by_role)["collapse/distinct_share"] == pytest.approx(0.5)
    assert collapse_metrics([Episode(task={}, group=0, timelines=[], rewards={})]) == {}


def test_a_thinning_signal_warns_on_every_third_step_in_a_row_and_resets():
    signal = TrainingSignal()
    trained = {"tokens/trained": 5.0, "collapse/entropy": 0.02, "collapse/distinct_share": 0.3}
    episodes = [acted(0, "p", [1], [-0.1])]
    warned = []
    for tied in [0.75, 1.0, 0.6, 0.9, 0.2, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]:
        metrics = {**trained, "advantage/zero_variance_fraction": tied}
        assert signal.observe(episodes, metrics) is None
        warned.append(signal.collapse_warning(metrics))
    assert [index for index, warning in enumerate(warned) if warning] == [2, 7, 10]
    assert "tied for 3 steps in a row (60% now; collapse/entropy 0.020, collapse/distinct_share 0.30)" in warned[2]
    assert "tied for 6 steps in a row" in warned[10]


async def one_word(task, model, auxiliary_models):
    reply = await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=float(len(reply.content) % 3))


def test_a_run_logs_the_collapse_measures_and_the_scheduled_step_size_each_step(tiny_model_dir, tmp_path):
    tune(
        workflow_func=one_word,
        train_dataset=DatasetConfig(tasks=[{"topic": f"topic {i}"} for i in range(2)], total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=2),
        algorithm=AlgorithmConfig(
            group_size=4, batch_size=2, learning_rate=1e-3, lr_schedule="linear", allow_nothing_trained=True
        ),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [record for record in steps if "collapse/entropy" in record]
    assert len(trained) == 2
    assert [record["optim/learning_rate"] for record in trained] == pytest.approx([1e-3, 5e-4])  # linear over 2 steps
    for record in trained:
        assert record["collapse/entropy"] > 0 and math.isfinite(record["collapse/entropy"])
        assert 0 < record["collapse/distinct_share"] <= 1 and "advantage/zero_variance_fraction" in record
