"""Job configuration: validation messages, --set overrides, YAML round trips, the Job object, import paths."""

from __future__ import annotations

import sys
import types

import pytest
import yaml

from sparring.trainer.config import AlgorithmConfig, DatasetConfig, TuneConfig, TunerModelConfig, dump_config
from sparring.trainer.config_file import (
    apply_overrides,
    check_names,
    import_object,
    importable_path,
    load_config_file,
)
from sparring.trainer.job import Job
from sparring.trainer.schema import ConfigError
from sparring.types import AdamParams, SamplingParams


async def module_level_workflow(task, model, auxiliary_models):
    """An importable workflow (never run here)."""


def module_level_judge(task, output):
    """An importable judge (never run here)."""


# --- validation messages -------------------------------------------------------------------------


def test_bad_value_names_field_and_value():
    with pytest.raises(ConfigError, match=r"^group_size: Input should be greater than or equal to 1 \(got 0\)$"):
        AlgorithmConfig(group_size=0)


def test_nested_error_names_dotted_path():
    with pytest.raises(
        ConfigError, match=r"algorithm\.group_size: Input should be greater than or equal to 1 \(got 0\)"
    ):
        TuneConfig(algorithm={"group_size": 0})
    with pytest.raises(ConfigError, match=r"auxiliary_models\.participant\.top_p"):
        TuneConfig(auxiliary_models={"participant": {"top_p": 0}})


def test_unknown_field_lists_valid_fields():
    with pytest.raises(ConfigError) as caught:
        TuneConfig(algorithm={"lr": 1e-5})
    message = str(caught.value)
    assert message.startswith("algorithm.lr: unknown field")
    assert "learning_rate" in message and "group_size" in message


def test_a_misspelt_field_names_the_closest_valid_one_only():
    with pytest.raises(ConfigError) as caught:
        TuneConfig(algorithm={"learnig_rate": 1e-5})
    assert str(caught.value) == "algorithm.learnig_rate: unknown field; did you mean learning_rate?"


def test_every_problem_is_reported():
    with pytest.raises(ConfigError) as caught:
        TuneConfig(algorithm={"group_size": 0, "batch_size": 0}, model={"max_tokens": 0})
    problems = caught.value.problems  # one line for the command line, each problem listed here
    assert "\n" not in str(caught.value) and str(caught.value) == "; ".join(problems)
    assert [problem.split(":")[0] for problem in problems] == [
        "model.max_tokens",
        "algorithm.group_size",
        "algorithm.batch_size",
    ]


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        TunerModelConfig(temperature=-1)


def test_dataset_needs_exactly_one_source():
    with pytest.raises(ConfigError, match="exactly one of `path`"):
        DatasetConfig()
    with pytest.raises(ConfigError, match="exactly one of `path`"):
        DatasetConfig(path="data.jsonl", tasks=[{"seed": 0}])
    with pytest.raises(ConfigError, match=r"^train_dataset: give exactly one"):
        TuneConfig(train_dataset={})


def test_eval_fraction_conflicts_with_eval_dataset():
    with pytest.raises(ConfigError, match=r"train_dataset\.eval_fraction"):
        TuneConfig(train_dataset={"tasks": [{}], "eval_fraction": 0.2}, eval_dataset={"tasks": [{}]})


def test_loss_fn_config_keys_are_checked_against_the_loss():
    with pytest.raises(ConfigError, match=r"algorithm\.loss_fn_config: .*'clip_low_threshold'"):
        check_names(TuneConfig(algorithm={"loss_fn_config": {"epsilon": 0.2}}))
    assert AlgorithmConfig(loss_fn="cispo", loss_fn_config={"clip_high_threshold": 1.5}).loss_fn_config == {
        "clip_high_threshold": 1.5
    }


def test_remote_model_cannot_be_trained():
    with pytest.raises(ConfigError, match=r"model\.base_url: a remote endpoint cannot be trained"):
        TuneConfig(model={"base_url": "http://localhost:8000/v1"})
    with pytest.raises(ConfigError, match=r"models\.judge\.base_url"):
        TuneConfig(models={"judge": {"base_url": "http://localhost:8000/v1"}})
    remote = TuneConfig(
        auxiliary_models={"participant": {"model_path": "gpt-x", "base_url": "http://x/v1", "api_key": "k"}}
    )
    assert remote.auxiliary_models["participant"].is_remote


def test_several_models():
    config = TuneConfig(models={"pro": {}, "con": {"lora_rank": 8}, "old": {"trainable": False}})
    assert list(config.trainable_models()) == ["pro", "con"]
    assert list(TuneConfig().trainable_models()) == ["policy"]
    with pytest.raises(ConfigError, match="no model has trainable=true"):
        TuneConfig(models={"a": {"trainable": False}})
    with pytest.raises(ConfigError, match="share the names"):
        TuneConfig(models={"a": {}}, auxiliary_models={"a": {}})
    with pytest.raises(ConfigError, match="models.a b: a model name"):
        TuneConfig(models={"a b": {}})


def test_parameter_helpers():
    algorithm = AlgorithmConfig(learning_rate=3e-5, adam_beta2=0.99, weight_decay=0.01, grad_clip_norm=0.5)
    assert algorithm.adam_params() == AdamParams(
        learning_rate=3e-5, beta1=0.9, beta2=0.99, weight_decay=0.01, grad_clip_norm=0.5
    )
    linear, cosine = (
        AlgorithmConfig(learning_rate=1e-3, lr_schedule="linear"),
        AlgorithmConfig(learning_rate=1e-3, lr_schedule="cosine"),
    )
    assert [linear.adam_params(step, 4).learning_rate for step in range(4)] == pytest.approx(
        [1e-3, 7.5e-4, 5e-4, 2.5e-4]
    )
    assert [cosine.adam_params(step, 2).learning_rate for step in range(2)] == pytest.approx([1e-3, 5e-4])
    assert algorithm.adam_params(7, 8) == algorithm.adam_params()  # constant
    with pytest.raises(ConfigError, match="algorithm.lr_schedule"):
        TuneConfig(algorithm={"lr_schedule": "step"})
    params = SamplingParams(**TunerModelConfig(temperature=0.7, top_k=50, max_tokens=64).sampling_params())
    assert (params.temperature, params.top_k, params.top_p, params.max_tokens) == (0.7, 50, 1.0, 64)


def test_fields_are_documented():
    for config_class in (DatasetConfig, TunerModelConfig, AlgorithmConfig, TuneConfig):
        undocumented = [name for name, field in config_class.model_fields.items() if not field.description]
        assert not undocumented, f"{config_class.__name__}: {undocumented}"


# --- overrides -----------------------------------------------------------------------------------


def test_overrides_parse_values_and_create_sections():
    original = {"algorithm": {"group_size": 4}}
    result = apply_overrides(
        original,
        [
            "algorithm.learning_rate=3e-5",
            "algorithm.normalize_advantages_by_std=false",
            "auxiliary_models.participant.temperature=0.5",
            "train_dataset.path=data/seeds.jsonl",
            "train_dataset.workflow_args.trainable_target=good_guy",
            "train_dataset.workflow_args.players=[1, 2]",
            "run_dir=",
        ],
    )
    assert result["algorithm"] == {"group_size": 4, "learning_rate": 3e-5, "normalize_advantages_by_std": False}
    assert result["auxiliary_models"] == {"participant": {"temperature": 0.5}}
    assert result["train_dataset"]["workflow_args"] == {"trainable_target": "good_guy", "players": [1, 2]}
    assert result["run_dir"] is None
    assert original == {"algorithm": {"group_size": 4}}
    config = TuneConfig.from_dict(result)
    assert config.algorithm.learning_rate == 3e-5 and config.train_dataset.path == "data/seeds.jsonl"


def test_override_of_a_null_section():
    assert apply_overrides({"train_dataset": None}, ["train_dataset.split=test"]) == {
        "train_dataset": {"split": "test"}
    }


def test_unknown_override_path_names_path_and_valid_keys():
    with pytest.raises(ConfigError) as caught:
        apply_overrides({}, ["algorithm.learnin_rate=1"])
    assert str(caught.value) == "algorithm.learnin_rate: unknown field; did you mean learning_rate?"
    with pytest.raises(ConfigError, match=r"^algo: unknown field; did you mean algorithm\?$"):
        apply_overrides({}, ["algo.group_size=2"])
    with pytest.raises(ConfigError, match="valid fields at the top level: workflow, judge"):
        apply_overrides({}, ["zzz.group_size=2"])
    with pytest.raises(ConfigError, match=r"auxiliary_models\.p\.temp: unknown field"):
        apply_overrides({}, ["auxiliary_models.p.temp=1"])
    with pytest.raises(ConfigError, match=r"algorithm\.group_size\.x: algorithm\.group_size holds a single value"):
        apply_overrides({}, ["algorithm.group_size.x=1"])


def test_malformed_override():
    for override in ["algorithm.group_size", "=3", "algorithm..group_size=3"]:
        with pytest.raises(ConfigError, match="must look like section.field=value"):
            apply_overrides({}, [override])


# --- files ---------------------------------------------------------------------------------------


def test_yaml_round_trip(tmp_path):
    config = TuneConfig(
        workflow="my_game:workflow",
        models={"pro": {"lora_rank": 8}, "con": {}},
        auxiliary_models={"participant": {"model_path": "smollm2-135m-instruct", "temperature": 0.3}},
        algorithm={"group_size": 4, "loss_fn_config": {"clip_low_threshold": 0.9}},
        train_dataset={"tasks": [{"seed": 1}, {"seed": 2}], "workflow_args": {"target": "werewolf"}},
        run_dir="runs/demo",
    )
    path = dump_config(config, tmp_path / "nested" / "job.yaml")
    assert yaml.safe_load(path.read_text())["algorithm"]["group_size"] == 4
    assert load_config_file(path) == config


def test_load_errors_name_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("algorithm:\n  group_size: 0\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: algorithm\.group_size: Input should be greater than or equal to 1 \(got 0\)"
    ):
        load_config_file(path)
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config_file(path)
    path.write_text("algorithm: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config_file(path)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "missing.yaml")
    path.write_text("")
    assert load_config_file(path) == TuneConfig()


def test_load_with_overrides(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("algorithm:\n  group_size: 4\n")
    assert load_config_file(path, ["algorithm.group_size=2", "model.max_tokens=32"]).algorithm.group_size == 2
    with pytest.raises(ConfigError, match=r"^--set algorithm\.size=2: algorithm\.size: unknown field"):
        load_config_file(path, ["algorithm.size=2"])


# --- import paths --------------------------------------------------------------------------------


def test_import_object_forms(tmp_path):
    import json
    import os.path

    assert import_object("json:dumps") is json.dumps
    assert import_object("os.path.join") is os.path.join
    assert import_object("sparring.trainer.config:TuneConfig.from_dict") == TuneConfig.from_dict
    script = tmp_path / "my_workflow.py"
    script.write_text("def run(task):\n    return task\n")
    assert import_object(f"{script}:run")({"x": 1}) == {"x": 1}


def test_import_object_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="write it as 'package.module:name'"):
        import_object("workflow")
    with pytest.raises(ConfigError, match="no module named 'no_such_module_xyz'"):
        import_object("no_such_module_xyz:run")
    with pytest.raises(ConfigError, match="json has no attribute 'nope'"):
        import_object("json:nope")
    with pytest.raises(ConfigError, match=r"json\.dumps has no attribute 'x'"):
        import_object("json:dumps.x")
    with pytest.raises(ConfigError, match="no such file"):
        import_object(f"{tmp_path / 'missing.py'}:run")
    broken = tmp_path / "broken_script.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="running the file failed: RuntimeError: boom"):
        import_object(f"{broken}:run")
    (tmp_path / "needs_missing_dep_xyz.py").write_text("import not_installed_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ConfigError, match="importing needs_missing_dep_xyz failed: No module named 'not_installed_dep_xyz'"
    ):
        import_object("needs_missing_dep_xyz:run")


def test_import_object_finds_modules_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd_only_workflow_xyz.py").write_text("VALUE = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    assert import_object("cwd_only_workflow_xyz:VALUE") == 42


# --- the Job object ------------------------------------------------------------------------------


def test_job_shortcuts_and_validation():
    job = Job(model="smollm2-135m-instruct", algorithm="grpo", run_dir="runs/x")
    assert job.config.model.model_path == "smollm2-135m-instruct"
    assert job.config.algorithm.algorithm_type == "grpo" and job.config.run_dir == "runs/x"
    with pytest.raises(ConfigError, match=r"model\.temperature"):
        Job(model={"temperature": -1})


def test_job_yaml_round_trip(tmp_path):
    job = (
        Job(
            model=TunerModelConfig(max_tokens=64),
            auxiliary_models={"participant": {"temperature": 0.2}},
            algorithm=AlgorithmConfig(group_size=4, batch_size=2),
        )
        .set_workflow(module_level_workflow, judge=module_level_judge)
        .set_data(train=[{"seed": 0}, {"seed": 1}], eval=str(tmp_path / "eval.jsonl"))
    )
    assert job.config.workflow == f"{__name__}:module_level_workflow"
    assert job.config.judge == f"{__name__}:module_level_judge"
    assert job.config.train_dataset.tasks == [{"seed": 0}, {"seed": 1}]
    assert job.config.eval_dataset.path == str(tmp_path / "eval.jsonl")
    assert job.dump_yaml(tmp_path / "job.yaml") is job
    loaded = Job.load_yaml(tmp_path / "job.yaml")
    assert loaded.config == job.config
    assert loaded.workflow is None


def test_job_set_data_forms(tmp_path):
    job = Job().set_data(train=tmp_path / "train.jsonl")
    assert job.config.train_dataset.path == str(tmp_path / "train.jsonl") and job.config.eval_dataset is None
    job.set_data(train={"path": "data", "split": "dev"}, eval=DatasetConfig(tasks=[{"q": 1}]))
    assert job.config.train_dataset.split == "dev" and job.config.eval_dataset.tasks == [{"q": 1}]
    with pytest.raises(ConfigError, match=r"train_dataset\.total_epochs"):
        job.set_data(train={"path": "data", "total_epochs": 0})
    with pytest.raises(ConfigError, match="a dataset must be"):
        job.set_data(train=42)


def test_job_workflow_by_import_path():
    job = Job().set_workflow("json:dumps")
    assert job.config.workflow == "json:dumps" and job.workflow is __import__("json").dumps
    with pytest.raises(ConfigError, match="has no attribute"):
        Job().set_workflow("json:no_such_workflow")


def test_unimportable_workflow_runs_but_cannot_be_saved(tmp_path, monkeypatch):
    def local_workflow(task, model, auxiliary_models):
        return None

    job = Job().set_workflow(local_workflow).set_data(train=[{"seed": 0}])
    assert job.config.workflow is None
    with pytest.raises(ConfigError, match="workflow .*local_workflow.* is not importable"):
        job.dump_yaml(tmp_path / "job.yaml")
    with pytest.raises(ConfigError, match=r"judge '.*<lambda>' is not importable"):
        Job().set_workflow(module_level_workflow, judge=lambda task, output: 1.0).dump_yaml(tmp_path / "job.yaml")

    calls = []
    fake_loop = types.ModuleType("sparring.trainer.loop")
    fake_loop.run_training = lambda config, workflow=None, judge=None, resume=None, overwrite=False, hooks=(): (
        calls.append((config, workflow, judge, resume)) or "result"
    )
    monkeypatch.setitem(sys.modules, "sparring.trainer.loop", fake_loop)
    assert job.tune(resume="runs/old") == "result"
    assert calls == [(job.config, local_workflow, None, "runs/old")]


def test_tune_without_workflow_is_an_error():
    with pytest.raises(ConfigError, match="call set_workflow"):
        Job().tune()


def test_importable_path():
    assert importable_path(module_level_workflow) == f"{__name__}:module_level_workflow"
    assert importable_path(TuneConfig) == "sparring.trainer.config:TuneConfig"
    assert importable_path(lambda: None) is None
    assert (
        importable_path(len) == "builtins:len"
    )  # not print: a Ray session in the same process replaces builtins.print
