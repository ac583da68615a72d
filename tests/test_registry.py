"""The game registry: every game folder holds its parts, `make_tasks(split, count, seed)` is one contract, a game's
default config reads its data from its own folder in any directory, and the command line takes a game's name
wherever it takes a config file (train, run, eval on the tiny model; an unknown name gets one line)."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparring.cli import app
from sparring.envs import (
    GAMES,
    UnknownGameError,
    game_config_path,
    game_folder,
    load_config,
    load_game_config,
    task_maker,
)
from sparring.trainer import ConfigError, import_object, load_train_and_eval_tasks

runner = CliRunner()


@pytest.mark.parametrize("name", GAMES)
def test_each_game_folder_holds_its_workflow_config_data_and_task_maker(name):
    config = load_game_config(name)
    assert game_config_path(name).parent == game_folder(name) and import_object(config.workflow)
    for dataset in (config.train_dataset, config.eval_dataset):
        path = Path(dataset.path)
        assert path.is_absolute() and path.is_file() and path.parent == game_folder(name) / "data"
    for policy in config.baselines.values():
        assert policy.startswith(f"sparring.envs.{name}:") and import_object(policy)
    make_tasks = task_maker(name)
    for split in ("train", "eval"):
        tasks = make_tasks(split, 3, 5)
        assert len(tasks) == 3 and all(isinstance(task, dict) and task for task in tasks)
        assert tasks == make_tasks(split, 3, 5) and make_tasks(split, 1, 5) == tasks[:1]
    with pytest.raises(ValueError, match="split"):
        make_tasks("test", 1, 0)


def test_a_games_config_reads_its_data_from_its_folder_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_game_config("guess_number")
    train, held_out = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    assert len(train) == 128 and len(held_out) == 100
    (tmp_path / "mine.jsonl").write_text('{"secret": 3}\n')
    overridden = load_game_config("guess_number", ["train_dataset.path=mine.jsonl"])
    assert (
        overridden.train_dataset.path == "mine.jsonl"
    )  # a path the user gives stays relative to the working directory
    assert load_train_and_eval_tasks(overridden.train_dataset, None)[0][0]["secret"] == 3


def test_load_config_takes_a_yaml_path_as_before_or_a_games_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(
        yaml.safe_dump(
            {"workflow": "sparring.envs.guess_number:guess_number", "train_dataset": {"path": "data/train.jsonl"}}
        )
    )
    assert (
        load_config("job.yaml").train_dataset.path == "data/train.jsonl"
    )  # not rebased: relative to the working directory
    assert load_config("tictactoe").workflow == "sparring.envs.tictactoe:tictactoe"
    (tmp_path / "tictactoe").write_text(
        yaml.safe_dump({"workflow": "sparring.envs.debate:Debate", "train_dataset": {"tasks": [{"topic": "x"}]}})
    )
    assert load_config("tictactoe").workflow == "sparring.envs.debate:Debate"  # an existing file wins over a name
    with pytest.raises(UnknownGameError, match="unknown game 'chess'; known games: " + ", ".join(GAMES)):
        load_config("chess")
    with pytest.raises(ConfigError, match="cannot read config file missing.yaml"):
        load_config("missing.yaml")


def tiny(tiny_model_dir, tmp_path) -> list[str]:
    """--set overrides that put a game's default config on the tiny model and keep its records in tmp_path."""
    return [
        "--set",
        f"model.model_path={tiny_model_dir}",
        "--set",
        "model.lora_rank=4",
        "--set",
        f"run_dir={tmp_path / 'run'}",
        "--set",
        "logging.tensorboard=false",
    ]


def test_cli_runs_and_evaluates_a_game_by_name_from_any_directory(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = runner.invoke(app, ["run", "guess_number", "--tasks", "1", *tiny(tiny_model_dir, tmp_path)])
    assert ran.exit_code == 0, ran.output
    assert "policy" in ran.output and "reward" in ran.output
    evaluated = runner.invoke(
        app, ["eval", "tictactoe", "--tasks", "1", "--output", "eval.json", *tiny(tiny_model_dir, tmp_path)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert "random_legal" in evaluated.output and "minimax" in evaluated.output and (tmp_path / "eval.json").is_file()


def test_cli_trains_a_game_by_name_and_its_run_resumes_from_anywhere(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = [
        "--set",
        "train_dataset.total_steps=1",
        "--set",
        "algorithm.group_size=2",
        "--set",
        "algorithm.batch_size=1",
        "--set",
        "evaluation.interval_steps=0",
    ]
    trained = runner.invoke(app, ["train", "guess_number", *tiny(tiny_model_dir, tmp_path), *steps])
    assert trained.exit_code == 0, trained.output
    assert "done: 1 steps" in trained.output
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["train_dataset"]["path"] == str(game_folder("guess_number") / "data" / "train.jsonl")


def test_cli_names_the_known_games_for_an_unknown_name():
    result = runner.invoke(app, ["train", "chess"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown game 'chess'" in lines[0] and all(name in lines[0] for name in GAMES)
