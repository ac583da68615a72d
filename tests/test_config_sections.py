"""The run's mechanics as sections of their own (`runner:`, `evaluation:`, `checkpoints:`), their old `algorithm:` keys
still read with one deprecation line, and a config read without importing the code it names."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import yaml

from sparring import AlgorithmConfig, CheckpointsConfig, EvaluationConfig, RunnerConfig
from sparring.trainer import ConfigError, TuneConfig, load_config_file
from sparring.trainer.config import dump_config
from sparring.trainer.sections import MOVED_KEYS

NOTE = "deprecated config keys"


def notes(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if NOTE in record.getMessage()]


def write(tmp_path, job: dict, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(job))
    return path


# --- (a) an old key: accepted, one line, in its new home ------------------------------------------------------------


def test_old_keys_in_yaml_land_in_their_sections_with_one_line_naming_the_new_keys(tmp_path, caplog):
    old = {"save_interval_steps": 3, "eval_tasks": 5, "episode_timeout_s": 42.0, "runner": "local"}
    with caplog.at_level(logging.WARNING):
        config = load_config_file(write(tmp_path, {"algorithm": {"group_size": 2, **old}}))
    (line,) = notes(caplog)
    for key in old:
        assert f"algorithm.{key} -> {'.'.join(MOVED_KEYS[key])}" in line, line
    assert "\n" not in line
    assert config.checkpoints.interval_steps == 3 and config.evaluation.max_tasks == 5
    assert config.runner.episode_timeout_s == 42.0 and config.runner.backend == "local"
    assert config.algorithm.group_size == 2
    saved = yaml.safe_load(dump_config(config, tmp_path / "saved.yaml").read_text())
    assert not set(saved["algorithm"]) & set(MOVED_KEYS), "the saved config writes the new keys only"
    assert saved["checkpoints"]["interval_steps"] == 3 and saved["runner"]["episode_timeout_s"] == 42.0
    assert load_config_file(tmp_path / "saved.yaml") == config, "the old keys leave nothing behind in `algorithm`"


def test_old_keyword_arguments_of_algorithm_config_keep_working(caplog):
    with caplog.at_level(logging.WARNING):
        algorithm = AlgorithmConfig(group_size=2, max_concurrency=3, eval_interval_steps=2, keep_checkpoints=1)
        config = TuneConfig(algorithm=algorithm)
    assert len(notes(caplog)) == 1, notes(caplog)
    assert config.runner.max_concurrency == 3 and config.evaluation.interval_steps == 2 and config.checkpoints.keep == 1
    assert config.evaluation.evaluates_before(2) and not config.evaluation.evaluates_before(1)


def test_a_set_override_of_an_old_key_sets_the_new_one(tmp_path, caplog):
    path = write(tmp_path, {"evaluation": {"interval_steps": 16}})
    with caplog.at_level(logging.WARNING):
        config = load_config_file(path, ["algorithm.eval_interval_steps=0"])
    assert config.evaluation.interval_steps == 0 and len(notes(caplog)) == 1


def test_an_old_key_is_checked_against_the_new_keys_bounds_and_may_not_contradict_it():
    with pytest.raises(ConfigError, match=r"^algorithm\.episode_timeout_s: .*less than or equal to 86400"):
        TuneConfig(algorithm={"episode_timeout_s": 1e9})
    with pytest.raises(ConfigError, match=r"algorithm\.save_interval_steps: moved to checkpoints\.interval_steps"):
        TuneConfig(algorithm={"save_interval_steps": 3}, checkpoints={"interval_steps": 4})
    TuneConfig(algorithm={"save_interval_steps": 4}, checkpoints={"interval_steps": 4})  # the same value: no quarrel


def test_the_packaged_games_use_the_new_keys(caplog):
    from sparring.envs.registry import GAMES, load_game_config

    with caplog.at_level(logging.WARNING):
        for game in GAMES:
            load_game_config(game)
    assert not notes(caplog)


# --- (b) the sections' own keys ---------------------------------------------------------------------------------------


def test_the_sections_keys(tmp_path, caplog):
    job = {
        "runner": {"backend": "local", "max_concurrency": 8, "episode_timeout_s": 60, "error_reward": -1.0},
        "evaluation": {"interval_steps": 4, "max_tasks": 10},
        "checkpoints": {"interval_steps": 2, "keep": 3},
    }
    with caplog.at_level(logging.WARNING):
        config = load_config_file(write(tmp_path, job))
    assert not notes(caplog)
    assert config.runner == RunnerConfig(backend="local", max_concurrency=8, episode_timeout_s=60, error_reward=-1.0)
    assert config.evaluation == EvaluationConfig(interval_steps=4, max_tasks=10)
    assert config.checkpoints == CheckpointsConfig(interval_steps=2, keep=3)
    assert load_config_file(dump_config(config, tmp_path / "again.yaml")) == config
    for bad, named in [
        ({"runner": {"backend": "slurm"}}, "runner.backend"),
        ({"runner": {"max_concurrency": 0}}, "runner.max_concurrency"),
        ({"evaluation": {"max_tasks": 0}}, "evaluation.max_tasks"),
        ({"checkpoints": {"keep": 0}}, "checkpoints.keep"),
        ({"checkpoints": {"interval_step": 1}}, "checkpoints.interval_step: unknown field; did you mean"),
    ]:
        with pytest.raises(ConfigError, match="^" + named.replace(".", r"\.")):
            TuneConfig.from_dict(bad)


def test_the_runner_defaults_are_the_rollout_layers():
    from sparring.rollout import RunnerSettings
    from sparring.runner_defaults import RUNNER_DEFAULTS

    settings, runner = RunnerSettings(), RunnerConfig()
    assert {name: getattr(settings, name) for name in RUNNER_DEFAULTS} == RUNNER_DEFAULTS
    assert AlgorithmConfig().group_size == RUNNER_DEFAULTS["group_size"]
    assert {name: getattr(runner, name) for name in RUNNER_DEFAULTS if name != "group_size"} == {
        name: value for name, value in RUNNER_DEFAULTS.items() if name != "group_size"
    }


# --- (c) reading imports nothing; building checks the names, before any model loads -----------------------------------

READ_THEN_IMPORTED = """
import sys
from sparring.trainer import load_config_file
config = load_config_file(sys.argv[1])
loaded = [name for name in ("torch", "sparring.engine.losses", "sparring.algorithms") if name in sys.modules]
print("workflow", config.workflow.rsplit(":", 1)[-1], "loaded", loaded, "marks", open(sys.argv[2]).read() or "none")
"""


def test_reading_a_config_imports_no_user_code_and_no_torch(tmp_path):
    marks = tmp_path / "marks.txt"
    marks.write_text("")
    (tmp_path / "side_effects.py").write_text(
        f"open({str(marks)!r}, 'a').write('imported ')\n"
        "def policy(messages, rng):\n    return 'x'\n"
        "def loss(target_logprobs, inputs, config):\n    return target_logprobs\n"
    )
    job = {
        "workflow": "no_such_module_xyz:play",
        "baselines": {"b": "side_effects:policy"},
        "algorithm": {"loss_fn": "side_effects:loss", "algorithm_type": "no_such_module_xyz:advantages"},
        "step_hooks": ["side_effects:Hook"],
    }
    ran = subprocess.run(
        [sys.executable, "-c", READ_THEN_IMPORTED, str(write(tmp_path, job)), str(marks)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.stdout.strip() == "workflow play loaded [] marks none", ran.stdout + ran.stderr


def test_a_missing_workflow_is_one_line_when_the_run_is_built_before_any_model_loads(tmp_path, monkeypatch):
    from sparring.trainer import resolve

    def no_model_loads(*args, **kwargs):
        raise AssertionError("a model loaded before the config's names were checked")

    monkeypatch.setattr(resolve, "build_models", no_model_loads)
    monkeypatch.setattr(resolve, "check_models", no_model_loads)
    job = {"workflow": "no_such_module_xyz:play", "train_dataset": {"tasks": [{"secret": 3}]}}
    config = load_config_file(write(tmp_path, job))  # read: nothing imported, no error
    with pytest.raises(ConfigError) as caught:
        resolve.resolve_run(config, run_dir=tmp_path / "run", training=True, write_config=True)
    message = str(caught.value)
    assert message.startswith("workflow: cannot import 'no_such_module_xyz:play'") and "\n" not in message, message
    assert not (tmp_path / "run").exists()
    bad_loss = TuneConfig(workflow="sparring.envs.guess_number:guess_number", algorithm={"loss_fn": "pp0"})
    with pytest.raises(ConfigError, match=r"^algorithm\.loss_fn: loss_fn 'pp0' is not a loss"):
        resolve.resolve_run(bad_loss, run_dir=tmp_path / "run", training=True)


def test_the_checks_of_names_list_every_problem_on_one_line():
    from sparring.trainer.config_file import check_names

    config = TuneConfig(
        model={"device": "gpu"},
        algorithm={"algorithm_type": "gpro", "loss_fn_config": {"epsilon": 0.2}},
        baselines={"b": "no_such_module_xyz:policy"},
    )
    with pytest.raises(ConfigError) as caught:
        check_names(config)
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "model.device",
        "algorithm.algorithm_type",
        "algorithm.loss_fn_config",
        "baselines.b",
    ]
    assert "\n" not in str(caught.value)
