"""`sparring new NAME` writes a game folder in the packaged games' shape that trains as it is on the tiny model."""

from pathlib import Path

from typer.testing import CliRunner

from sparring.cli import app

runner = CliRunner()


def test_a_new_game_trains_out_of_the_box(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    created = runner.invoke(app, ["new", "echo_game"])
    assert created.exit_code == 0, created.output
    folder = Path("echo_game")
    assert {path.name for path in folder.iterdir()} >= {
        "workflow.py",
        "rules.py",
        "tasks.py",
        "baselines.py",
        "config.yaml",
        "data",
    }
    assert len((folder / "data" / "train.jsonl").read_text().splitlines()) == 64
    tiny = ["--set", f"model.model_path={tiny_model_dir}", "--set", "logging.console=false"]
    trained = runner.invoke(app, ["train", "echo_game/config.yaml", "--steps", "2", "--eval-tasks", "4", *tiny])
    assert trained.exit_code == 0, trained.output
    assert "policy:" in trained.output and "echo" in trained.output and "random_letters" in trained.output, (
        "trained, then evaluated beside the baselines"
    )
    again = runner.invoke(app, ["new", "echo_game"])
    assert again.exit_code == 2 and "not empty" in again.output
    assert runner.invoke(app, ["new", "2fast"]).exit_code == 2


def test_a_game_made_with_dir_runs_from_any_working_directory(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["new", "echo_game", "--dir", "games"]).exit_code == 0
    (tmp_path / "elsewhere").mkdir()
    tiny = ["--set", f"model.model_path={tiny_model_dir}", "--set", "logging.console=false"]
    for where, config in (
        (tmp_path, "games/echo_game/config.yaml"),
        (tmp_path / "elsewhere", "../games/echo_game/config.yaml"),
    ):
        monkeypatch.chdir(where)
        ran = runner.invoke(app, ["run", config, "--tasks", "1", *tiny])
        assert ran.exit_code == 0, f"from {where}: {ran.output}"
        assert "=== episode" in ran.output
