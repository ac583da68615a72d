"""Baselines beside the model: the `baselines:` config checked when it is built, each example config naming its game's
baselines, and the comparison (models and baselines side by side, with intervals) from `tune()` and
`sparring eval` on the tiny model."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    EvaluationConfig,
    Job,
    LoggingConfig,
    TunerModelConfig,
)
from sparring.algorithms import wilson_interval
from sparring.cli import app
from sparring.envs import game_config_path
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, TuneConfig
from sparring.trainer.config_file import check_names

QUIET = LoggingConfig(console=False, tensorboard=False, save_rollouts=False)


def test_baselines_in_the_config_are_checked_when_it_is_built():
    config = TuneConfig(baselines={"binary_search": "sparring.envs.guess_number:binary_search"})
    assert config.baselines == {"binary_search": "sparring.envs.guess_number:binary_search"}
    for bad, message in [
        (
            "sparring.envs.guess_number:nope",
            "baselines.b: cannot import 'sparring.envs.guess_number:nope'.*no attribute 'nope'",
        ),
        (
            "no_such_module:policy",
            "baselines.b: cannot import 'no_such_module:policy': no module named 'no_such_module'",
        ),
        ("sparring.envs.guess_number.rules:RULES", "baselines.b: .*is a str, not a policy function"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_names(TuneConfig(baselines={"b": bad}))
    with pytest.raises(ConfigError, match="baselines.trained: .*not 'untrained' or 'trained'"):
        TuneConfig(baselines={"trained": "sparring.envs.guess_number:binary_search"})


@pytest.mark.parametrize("path", ["guess_number", "tictactoe", "twenty_questions", "werewolf"])
def test_each_example_config_names_its_games_baselines(path):
    config = TuneConfig.from_dict(yaml.safe_load(game_config_path(path).read_text()))
    assert config.baselines and all(value.startswith(f"sparring.envs.{path}:") for value in config.baselines.values())


def test_tune_evaluates_baselines_once_beside_the_first_and_last_evaluation(tiny_model_dir, tmp_path):
    tasks = [{"secret": s} for s in (3, 9, 12, 5)]
    config = TuneConfig(
        workflow="sparring.envs.guess_number:guess_number",
        train_dataset=DatasetConfig(tasks=tasks, total_steps=2, workflow_args={"max_turns": 4}),
        eval_dataset=DatasetConfig(tasks=tasks, workflow_args={"max_turns": 4}),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=2),
        algorithm=AlgorithmConfig(group_size=2, batch_size=2),
        evaluation=EvaluationConfig(interval_steps=1),
        run_dir=str(tmp_path / "run"),
        logging=QUIET,
        baselines={
            "binary_search": "sparring.envs.guess_number:binary_search",
            "random_valid": "sparring.envs.guess_number:random_valid",
        },
    )
    result = Job.from_config(config).tune()
    labels = [column.label for column in result.comparison.columns]
    assert (
        labels == ["untrained", "step 1", "trained", "binary_search", "random_valid"]
        and result.comparison.subject == "trained"
    )
    binary = result.comparison.column("binary_search")
    assert binary.episodes == 4 and binary.estimates["workflow/success"].mean == 1.0  # 3, 9, 12 and 5 in 4 guesses
    saved = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert [c["label"] for c in saved["columns"]] == labels and saved["subject_vs"].keys() == {
        "untrained",
        "step 1",
        "binary_search",
        "random_valid",
    }
    logged = read_metrics(tmp_path / "run")
    baseline_rows = [row for row in logged if "baseline/binary_search/workflow/success" in row]
    assert len(baseline_rows) == 1 and baseline_rows[0]["step"] == 0
    assert baseline_rows[0]["baseline/binary_search/workflow/success/ci_low"] == pytest.approx(wilson_interval(4, 4)[0])

    trained = next(iter(result.sampler_paths.values()))
    warm = config.model_copy(
        update={"model": config.model.model_copy(update={"adapter_path": trained}), "run_dir": str(tmp_path / "warm")}
    )
    warm_labels = [column.label for column in Job.from_config(warm).tune().comparison.columns]
    assert warm_labels == ["step 0", "step 1", "trained", "binary_search", "random_valid"], (
        "a run that starts from an adapter has no untrained column"
    )
    evaluations = [row for row in logged if "eval/reward/mean" in row]
    assert [row["step"] for row in evaluations] == [0, 1, 2]
    assert all(
        row["eval/reward/mean/ci_low"] <= row["eval/reward/mean"] <= row["eval/reward/mean/ci_high"]
        for row in evaluations
    )


def test_sparring_eval_shows_the_model_beside_each_baseline_with_intervals_and_markers(tiny_model_dir, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"secret": {n}}}\n' for n in range(1, 17)))
    config = {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 3, "lora_rank": 2},
        "train_dataset": {"path": str(tasks), "workflow_args": {"max_turns": 4}},
        "eval_dataset": {"path": str(tasks), "workflow_args": {"max_turns": 4}},
        "baselines": {
            "random_valid": "sparring.envs.guess_number:random_valid",
            "binary_search": "sparring.envs.guess_number:binary_search",
        },
        "logging": {"tensorboard": False, "console": False},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["eval", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the footnote wraps at the table's width
    for expected in [
        "untrained",
        "random_valid",
        "binary_search",
        "success",
        "0.938 [0.717, 0.989]",
        "Wilson score",
        "bootstrap",
        "entirely above / below",
    ]:
        assert expected in text, expected
    saved = json.loads((tmp_path / "run" / "eval.json").read_text())
    columns = {c["label"]: c for c in saved["columns"]}
    assert columns["binary_search"]["metrics"]["workflow/success"]["mean"] == 0.9375
    model = columns["untrained"]["metrics"]["workflow/success"]
    binary = columns["binary_search"]["metrics"]["workflow/success"]
    separated = model["high"] < binary["low"]
    assert (saved["subject_vs"]["binary_search"].get("workflow/success") == "below") == separated
    success_line = next(line for line in result.output.splitlines() if "success" in line)
    assert ("▼" in success_line) == separated

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**config, "baselines": {"oops": "sparring.envs.guess_number:no_such_policy"}}))
    failed = CliRunner().invoke(app, ["eval", str(bad)])
    assert failed.exit_code == 2 and "baselines.oops: cannot import" in failed.output
