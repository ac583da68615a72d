"""The `sparring` command line on the tiny model: debug run, train with overrides, eval, bad input."""

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from sparring.cli import _same_file, app
from sparring.logging import read_metrics

runner = CliRunner()


def write_config(tmp_path, tiny_model_dir, **sections):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"secret": {n}}}\n' for n in (3, 9, 12, 5)))
    config = {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 4},
        "algorithm": {"group_size": 2, "batch_size": 2, "learning_rate": 1e-3},
        "train_dataset": {"path": str(tasks), "total_steps": 1, "workflow_args": {"max_turns": 2}},
        "eval_dataset": {"path": str(tasks), "workflow_args": {"max_turns": 2}},
        "logging": {"tensorboard": False, "console": False},
        **sections,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_run_prints_transcripts_without_training(tmp_path, tiny_model_dir):
    result = runner.invoke(app, ["run", str(write_config(tmp_path, tiny_model_dir)), "--tasks", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.count("policy") >= 2 and "reward" in result.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_run_exits_1_when_episodes_failed_and_warns_when_no_trainable_agent_spoke(tmp_path, tiny_model_dir):
    config = str(write_config(tmp_path, tiny_model_dir))
    failing = runner.invoke(
        app, ["run", config, "--tasks", "3", "--set", "workflow=tests.test_failing_runs:always_raises"]
    )
    assert failing.exit_code == 1, failing.output
    assert "error: 3 of 3 episodes failed (first: " in failing.output and "broken workflow" in failing.output
    silent = runner.invoke(app, ["run", config, "--set", "workflow=tests.test_training_signal:nobody_trainable_speaks"])
    assert silent.exit_code == 0, silent.output
    assert "warning: no trainable agent spoke in any episode" in silent.output


def test_train_with_overrides_then_eval_the_adapter(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir)
    result = runner.invoke(
        app, ["train", str(config), "--set", "train_dataset.total_steps=2", "--set", "evaluation.interval_steps=2"]
    )
    assert result.exit_code == 0, result.output
    assert [m["step"] for m in read_metrics(tmp_path / "run") if "reward/mean" in m] == [1, 2]
    assert "Held-out evaluation" in result.output and "success" in result.output
    adapter = next(line.split(": ", 1)[1] for line in result.output.splitlines() if line.strip().startswith("policy:"))
    evaluated = runner.invoke(app, ["eval", str(config), "--adapter", adapter.strip(), "--tasks", "2"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "reward" in evaluated.output and "invalid_rate" in evaluated.output
    copy = tmp_path / "copy"
    shutil.copytree(adapter.strip(), copy)
    rank_2 = runner.invoke(
        app, ["train", str(config), "--set", "model.lora_rank=2", "--set", f"run_dir={tmp_path / 'rank-2'}"]
    )
    other = next(
        line.split(": ", 1)[1].strip() for line in rank_2.output.splitlines() if line.strip().startswith("policy:")
    )
    compared = runner.invoke(
        app,
        [
            "eval",
            str(config),
            "--adapter",
            adapter.strip(),
            "--adapter",
            str(copy),
            "--adapter",
            other,
            "--tasks",
            "2",
            "--output",
            str(tmp_path / "all.json"),
        ],
    )
    assert compared.exit_code == 0, compared.output  # the config says rank 4: each adapter is evaluated at its own rank
    columns = json.loads((tmp_path / "all.json").read_text())["columns"]
    assert [(c["label"], c["episodes"]) for c in columns] == [
        (str(Path(adapter.strip())), 2),
        ("copy", 2),
        (other, 2),
    ]  # two share the folder name "final"
    assert (
        columns[0]["metrics"]["reward/mean"] == columns[1]["metrics"]["reward/mean"]
    )  # the same weights, the same seeds


def test_bad_overrides_and_fields_name_the_path(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir)
    result = runner.invoke(app, ["train", str(config), "--set", "algorithm.gruop_size=4"])
    assert result.exit_code == 2 and "algorithm.gruop_size" in result.output
    result = runner.invoke(app, ["train", str(config), "--set", "algorithm.group_size=0"])
    assert result.exit_code == 2 and "algorithm.group_size" in result.output


def test_resume_from_the_run_directory_alone(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir, checkpoints={"interval_steps": 1})
    assert runner.invoke(app, ["train", str(config)]).exit_code == 0
    saved = tmp_path / "run" / "config.yaml"
    saved.write_text(saved.read_text().replace("total_steps: 1", "total_steps: 2"))
    result = runner.invoke(app, ["train", "--resume", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "2 steps" in result.output
    assert [m["step"] for m in read_metrics(tmp_path / "run") if "reward/mean" in m] == [1, 2]


def test_resume_with_another_config_file_is_refused_in_one_line_naming_both(tmp_path, tiny_model_dir, monkeypatch):
    config = write_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(config.read_text())
    result = runner.invoke(app, ["train", str(config), "--resume", str(run)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(config) in lines[0], result.output
    assert str(run / "config.yaml") in lines[0] and "ignored" in lines[0], result.output
    monkeypatch.chdir(tmp_path)
    assert _same_file(Path("run/config.yaml"), run / "config.yaml")  # the run's own config, however spelled
    assert not _same_file(config, run / "config.yaml")


def test_eval_shows_win_rates_per_agent_but_not_their_rewards(tmp_path, tiny_model_dir):
    tasks = tmp_path / "motions.jsonl"
    tasks.write_text('{"topic": "Cats are better than dogs."}\n{"topic": "Tea is better than coffee."}\n')
    debater = {"model_path": str(tiny_model_dir), "max_tokens": 3, "lora_rank": 2}
    config = {
        "workflow": "sparring.envs.debate:Debate",
        "models": {"pro": debater, "con": debater},
        "auxiliary_models": {"judge": {"model_path": str(tiny_model_dir), "max_tokens": 2}},
        "train_dataset": {"path": str(tasks), "workflow_args": {"rounds": 1}},
        "eval_dataset": {"path": str(tasks), "workflow_args": {"rounds": 1}},
        "logging": {"tensorboard": False, "console": False},
    }
    path = tmp_path / "debate.yaml"
    path.write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["eval", str(path), "--set", f"run_dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    assert "agent/pro/win_rate" in result.output and "agent/con/win_rate" in result.output
    assert "agent/pro/reward" not in result.output


def test_version_quiet_and_eval_progress(tmp_path, tiny_model_dir, caplog):
    import importlib.metadata

    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.strip() == f"sparring {importlib.metadata.version('sparring')}"

    config = write_config(tmp_path, tiny_model_dir)
    talkative = runner.invoke(
        app, ["eval", str(config), "--set", "logging.console=true", "--set", "logging.tensorboard=true"]
    )
    assert talkative.exit_code == 0, talkative.output
    assert "eval untrained: 4/4 episodes" in talkative.output, "sparring eval counts its episodes"

    quiet = runner.invoke(
        app,
        [
            "--quiet",
            "train",
            str(config),
            "--set",
            "logging.console=true",
            "--set",
            "logging.tensorboard=true",
            "--set",
            "eval_dataset=null",
        ],
    )
    assert quiet.exit_code == 0, quiet.output
    assert "step 1/1" not in quiet.output and "episodes" not in quiet.output, "no progress lines"
    assert not [record for record in caplog.records if record.levelno == 30 and record.name.startswith("sparring")], (
        "no warnings"
    )
    assert "done: 1 steps" in quiet.output and "report (open in a browser):" in quiet.output, "results still shown"


def test_steps_and_eval_tasks_make_a_short_run(tmp_path, tiny_model_dir):
    config = write_config(tmp_path, tiny_model_dir)
    result = runner.invoke(app, ["train", str(config), "--steps", "2", "--eval-tasks", "1"])
    assert result.exit_code == 0, result.output
    records = read_metrics(tmp_path / "run")
    assert [m["step"] for m in records if "reward/mean" in m] == [1, 2]
    assert [m["eval/episodes"] for m in records if "eval/episodes" in m] == [1, 1], (
        "before and after training, one task each"
    )


def test_help_shows_flags_bare_and_list_options_by_their_items():
    for command in ([], ["train"], ["run"], ["eval"], ["view"], ["export"], ["serve"], ["new"]):
        shown = runner.invoke(app, [*command, "--help"], terminal_width=160)
        assert shown.exit_code == 0, shown.output
        assert "<bool>" not in shown.output and "list[" not in shown.output, shown.output
    assert "--set               <field=value>" in runner.invoke(app, ["train", "--help"], terminal_width=160).output
