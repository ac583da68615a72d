"""Run folders never mix: re-running into a folder that holds a run is refused in one line naming --resume and
--overwrite; --overwrite replaces the run; a folder of other files is never deleted; --resume names a missing folder."""

import pytest
import yaml
from typer.testing import CliRunner

from sparring.cli import app
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, run_training
from sparring.trainer.loop import claim_run_folder

runner = CliRunner()


def write_config(tmp_path, tiny_model_dir):
    config = {
        "workflow": "tests.test_training_signal:same_reward_every_time",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 2},
        "algorithm": {"group_size": 2, "batch_size": 1, "allow_nothing_trained": True},
        "train_dataset": {"tasks": [{"topic": "a"}, {"topic": "b"}], "total_steps": 2},
        "logging": {"tensorboard": False, "console": False},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_second_run_into_a_run_folder_is_refused_and_overwrite_replaces_it(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir)
    assert runner.invoke(app, ["train", str(config)]).exit_code == 0
    again = runner.invoke(app, ["train", str(config)])
    assert again.exit_code == 2
    (line,) = again.output.strip().splitlines()
    assert "already holds a run" in line and f"--resume {tmp_path / 'run'}" in line and "--overwrite" in line
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2], "the first run is untouched"
    replaced = runner.invoke(app, ["train", str(config), "--overwrite", "--set", "train_dataset.total_steps=1"])
    assert replaced.exit_code == 0, replaced.output
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1], "one run's steps, not 1, 2, 1"


def test_tune_refuses_a_run_folder_before_any_model_loads(tmp_path, tiny_model_dir, monkeypatch):
    from sparring.envs import load_config
    from sparring.trainer import resolve

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    monkeypatch.setattr(resolve, "build_models", lambda *args: pytest.fail("a model loaded"))
    with pytest.raises(ConfigError, match=r"already holds a run.*overwrite=True"):
        run_training(load_config(write_config(tmp_path, tiny_model_dir)))


def test_a_config_error_comes_before_the_run_folder_check(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    for bad, named in (
        ("model.model_path=does-not-exist", "does-not-exist"),
        ("workflow=tests.nowhere:f", "tests.nowhere"),
    ):
        result = runner.invoke(app, ["train", str(config), "--set", bad, "--overwrite"])
        assert result.exit_code == 2, result.output
        assert "already holds a run" not in result.output and named in result.output, result.output
        assert (tmp_path / "run" / "metrics.jsonl").exists(), "--overwrite deleted nothing for a config that cannot run"


def test_overwrite_never_deletes_a_folder_that_holds_no_run(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    claim_run_folder(tmp_path, resume=False, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    claim_run_folder(tmp_path / "new", resume=False, overwrite=False)  # a new folder is fine


def test_resume_of_a_folder_that_does_not_exist_says_so(tmp_path):
    result = runner.invoke(app, ["train", "--resume", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and f"--resume {tmp_path / 'nowhere'}: the folder does not exist" in result.output
    assert "cannot read config file" not in result.output
