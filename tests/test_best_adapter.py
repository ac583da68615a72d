"""`validation:`: a run plays validation tasks when due and keeps its best weights as the sampler weights `best`.

The toy game names a colour with `choices=`; the reward is 1 for red, which the tiny model names in ~7 % of its
replies (yellow in ~91 %), so the policy's validation score moves from step to step as it learns. The run must
record every due validation, choose the best (the earliest
on a tie), and keep exactly those weights: `sparring eval`'s path (`run_evaluation`) of the `best` adapter on the
validation tasks replays the choice's games and gets its score to the last digit.
"""

import asyncio
import json

import pytest

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    ConfigError,
    DatasetConfig,
    DatasetError,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    TuneConfig,
    TunerModelConfig,
    ValidationConfig,
    WorkflowOutput,
    tune,
)
from sparring.trainer import load_config_file
from sparring.trainer.loop import run_evaluation

COLOURS = ["red", "green", "blue", "yellow"]


async def name_a_colour(task, model, auxiliary_models):
    first, second = [await model([{"role": "user", "content": "Name a colour."}], choices=COLOURS) for _ in range(2)]
    reds = [reply.content == "red" for reply in (first, second)]
    return WorkflowOutput(
        reward=float(reds[0]),
        metrics={"named_yellow": float(first.content == "yellow"), "mixed": float(reds[0] != reds[1])},
    )


def _config(tiny_model_dir, checkpoint_every: int = 0) -> dict:
    return dict(
        # At temperature 1 the tiny model names yellow ~9 times in 10 and red rarely; at 3, every colour often.
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4, temperature=3.0),
        algorithm=AlgorithmConfig(algorithm_type="grpo", group_size=8, batch_size=2, learning_rate=2e-3, seed=0),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=checkpoint_every),
        logging=LoggingConfig(console=False, tensorboard=False, save_rollouts=False),
    )


def _replay(tiny_model_dir, adapter: str, tasks: list[dict], metric: str) -> float:
    """The adapter's mean of `metric` on `tasks` as `sparring eval --adapter` measures it."""
    config = TuneConfig(
        workflow="tests.test_best_adapter:name_a_colour",
        train_dataset=DatasetConfig(tasks=tasks),
        eval_dataset=DatasetConfig(tasks=tasks),
        **{
            **_config(tiny_model_dir),
            "model": TunerModelConfig(
                model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4, temperature=3.0, adapter_path=adapter
            ),
        },
    )
    return asyncio.run(run_evaluation(config)).column("trained").estimates[metric].mean


def test_the_run_keeps_the_weights_that_validate_best_and_eval_of_them_replays_the_choice(tiny_model_dir, tmp_path):
    validation_tasks = [{}] * 16
    result = tune(
        workflow_func=name_a_colour,
        train_dataset=DatasetConfig(tasks=[{}], total_steps=6, seed=0),
        validation=ValidationConfig(
            dataset=DatasetConfig(tasks=validation_tasks), every_steps=2, from_step=1, metric="workflow/mixed"
        ),
        run_dir=tmp_path / "run",
        **_config(tiny_model_dir, checkpoint_every=1),
    )
    record = json.loads((tmp_path / "run" / "validation.json").read_text())
    steps = [entry["steps"] for entry in record["validations"]]
    assert steps == [2, 4, 6], f"due after every 2nd step from step 1 on: {record}"
    means = [entry["mean"] for entry in record["validations"]]
    best_index = means.index(max(means))
    assert record["chosen"] == record["validations"][best_index] and result.best.steps == steps[best_index]
    assert result.best_paths == record["paths"] and set(record["paths"]) == {"policy"}
    best, final = record["paths"]["policy"], result.sampler_paths["policy"]
    assert best.endswith("sampler_weights/best") and final.endswith("sampler_weights/final")
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "validation/workflow/mixed" in row] == [2, 4, 6]
    assert _replay(tiny_model_dir, best, validation_tasks, "workflow/mixed") == record["chosen"]["mean"]
    assert _replay(tiny_model_dir, final, validation_tasks, "workflow/mixed") == means[-1]
    assert record["chosen"]["mean"] != means[-1], (
        f"the final weights should validate worse than the best (else `best` is not told from `final`): {means}"
    )


def test_a_resumed_run_keeps_its_earlier_validations_and_best(tiny_model_dir, tmp_path):
    base = dict(workflow_func=name_a_colour, run_dir=tmp_path / "run", **_config(tiny_model_dir, checkpoint_every=1))
    validation = ValidationConfig(
        dataset=DatasetConfig(tasks=[{}] * 8), every_steps=1, from_step=3, metric="workflow/named_yellow", mode="min"
    )
    tune(train_dataset=DatasetConfig(tasks=[{}], total_steps=4, seed=0), validation=validation, **base)
    first = json.loads((tmp_path / "run" / "validation.json").read_text())
    assert [entry["steps"] for entry in first["validations"]] == [3, 4]
    config = load_config_file(tmp_path / "run" / "config.yaml", ["train_dataset.total_steps=6"])
    from sparring.trainer.loop import run_training

    result = run_training(config, workflow=name_a_colour, resume=tmp_path / "run")
    after = json.loads((tmp_path / "run" / "validation.json").read_text())
    assert after["validations"][:2] == first["validations"] and [entry["steps"] for entry in after["validations"]] == [
        3,
        4,
        5,
        6,
    ]
    lowest = min(after["validations"], key=lambda entry: (entry["mean"], entry["steps"]))
    assert after["chosen"] == lowest and result.best.steps == lowest["steps"]


def test_a_metric_the_games_do_not_report_is_named_with_the_ones_they_do(tiny_model_dir, tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"validation.metric: 'workflow/nope' is not a metric of the validation games; they have "
        r"\[.*'reward/mean'.*'workflow/named_yellow'",
    ):
        tune(
            workflow_func=name_a_colour,
            train_dataset=DatasetConfig(tasks=[{}], total_steps=2),
            validation=ValidationConfig(dataset=DatasetConfig(tasks=[{}]), metric="workflow/nope"),
            run_dir=tmp_path / "run",
            **_config(tiny_model_dir),
        )


def test_a_validation_file_that_cannot_be_read_is_named_before_the_models_load(tiny_model_dir, tmp_path):
    with pytest.raises(DatasetError, match=r"^validation.dataset.path: .*missing.jsonl"):
        tune(
            workflow_func=name_a_colour,
            train_dataset=DatasetConfig(tasks=[{}], total_steps=1),
            validation=ValidationConfig(dataset=DatasetConfig(path=str(tmp_path / "missing.jsonl"))),
            run_dir=tmp_path / "run",
            **_config(tiny_model_dir),
        )
    assert not (tmp_path / "run").exists()


def test_validation_settings_are_checked(tmp_path):
    TuneConfig(validation={"dataset": {"tasks": [{}]}}, algorithm={"max_staleness": 1})  # a barrier: async training
    with pytest.raises(ConfigError, match=r"validation.every_steps"):
        TuneConfig(validation={"dataset": {"tasks": [{}]}, "every_steps": 0})
    with pytest.raises(ConfigError, match=r"validation.mode"):
        TuneConfig(validation={"dataset": {"tasks": [{}]}, "mode": "best"})
    due = ValidationConfig(dataset=DatasetConfig(tasks=[{}]), every_steps=5, from_step=60)
    assert [steps for steps in range(0, 83) if due.due(steps, 82)] == [60, 65, 70, 75, 80, 82]


def test_a_validation_dataset_path_in_a_game_config_is_relative_to_its_folder(tmp_path):
    (tmp_path / "game").mkdir()
    (tmp_path / "game" / "config.yaml").write_text(
        "workflow: sparring.envs.guess_number:guess_number\ntrain_dataset: {path: "
        "data/train.jsonl}\nvalidation: {dataset: {path: data/train.jsonl}}\n"
    )
    config = load_config_file(tmp_path / "game" / "config.yaml", dataset_root=tmp_path / "game")
    assert config.validation.dataset.path == str(tmp_path / "game" / "data" / "train.jsonl")


def test_sparring_train_names_the_best_adapter_beside_the_final_one(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from sparring.cli import app
    from tests.test_cli import write_config

    config = write_config(tmp_path, tiny_model_dir)
    tasks = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(config),
            "--steps",
            "2",
            "--set",
            f"validation.dataset.path={tasks}",
            "--set",
            "validation.every_steps=1",
        ],
    )
    assert result.exit_code == 0, result.output
    chosen = json.loads((tmp_path / "run" / "validation.json").read_text())["chosen"]
    assert f"best on the validation tasks: step {chosen['steps']}, reward/mean {chosen['mean']:.3f}" in result.output
    assert (
        f"policy: {tmp_path / 'run' / 'checkpoints'}" in result.output
        and result.output.rstrip().count("sampler_weights/best") == 1
    )
