"""No silent no-ops and no misleading errors: held-out tasks are evaluated without an interval, a max_model_len past
the model's context is refused, --tasks 0 is an error, an override's error names the override, and import paths
resolve against the config file's folder first."""

import asyncio

import pytest
import yaml
from typer.testing import CliRunner

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, tune
from sparring.cli import app
from sparring.envs import load_config
from sparring.trainer import ConfigError, import_object, load_config_file
from sparring.trainer.loop import run_debug_episodes

TASKS = [{"topic": f"topic {i}"} for i in range(2)]
QUIET = LoggingConfig(console=False, tensorboard=False)


def test_an_eval_dataset_without_an_interval_is_evaluated_before_and_after_training(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func="tests.test_training_signal:same_reward_every_time",
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2),
        eval_dataset=DatasetConfig(tasks=TASKS),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=2),
        algorithm=AlgorithmConfig(group_size=2, batch_size=1, allow_nothing_trained=True),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert [evaluation["step"] for evaluation in result.evaluations] == [0, 2]
    assert [column.label for column in result.comparison.columns] == ["untrained", "trained"]


def test_a_max_model_len_beyond_the_models_context_is_a_config_error(tiny_model_dir, tmp_path):
    config = load_config_file(
        _write(
            tmp_path,
            {
                "workflow": "tests.test_training_signal:same_reward_every_time",
                "model": {"model_path": str(tiny_model_dir), "max_model_len": 16384},
                "train_dataset": {"tasks": TASKS},
            },
        )
    )
    with pytest.raises(ConfigError, match=r"model.max_model_len: 16384 is beyond the context of .*, 1024 tokens"):
        asyncio.run(run_debug_episodes(config))


def test_tasks_0_is_an_error_not_silence():
    for command in (["run", "guess_number", "--tasks", "0"], ["eval", "guess_number", "--tasks", "0"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and result.output.strip() == "error: --tasks 0: give at least 1 task", (
            result.output
        )


def test_an_overrides_error_names_the_override_not_the_packaged_file():
    with pytest.raises(ConfigError) as raised:
        load_config("guess_number", ["algorithm.group_size=0"])
    message = str(raised.value)
    assert message.startswith("--set algorithm.group_size=0: algorithm.group_size:") and "config.yaml" not in message
    with pytest.raises(ConfigError, match=r"^--set algorithm.gruop_size=4: algorithm.gruop_size: unknown field"):
        load_config("guess_number", ["algorithm.gruop_size=4"])


def test_a_workflow_module_beside_the_config_wins_over_a_same_named_folder_in_the_working_directory(
    tmp_path, monkeypatch
):
    game = tmp_path / "games" / "rhyme"
    game.mkdir(parents=True)
    (game / "rhyme.py").write_text("async def rhyme(task, model, auxiliary_models):\n    return None\n")
    (
        tmp_path / "rhyme"
    ).mkdir()  # e.g. the game's data folder: a namespace package named `rhyme` in the working directory
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config_file(_write(game, {"workflow": "rhyme:rhyme", "train_dataset": {"tasks": TASKS}}))
    assert config.workflow == f"{(game / 'rhyme.py').resolve()}:rhyme"
    assert import_object(config.workflow).__name__ == "rhyme"


def _write(folder, config):
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
