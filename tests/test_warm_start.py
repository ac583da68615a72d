"""The supervised warm start (`warm_start:`): worked examples learned by cross-entropy before the first RL step."""

from __future__ import annotations

import json

import pytest

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    EvaluationConfig,
    Job,
    LoggingConfig,
    TuneConfig,
    TunerModelConfig,
    WarmStartConfig,
)
from sparring.envs import load_game_config
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, DatasetError
from sparring.trainer.step import supervised_datum

QUIET = LoggingConfig(console=False, tensorboard=False, save_rollouts=False)


def chat(reply: str, weight: float = 1.0) -> dict:
    return {
        "messages": [{"role": "user", "content": "Say a number."}, {"role": "assistant", "content": reply}],
        "weight": weight,
    }


def test_an_example_is_its_chat_as_the_prompt_and_its_reply_with_the_end_of_turn_as_weighted_targets(tiny_loaded):
    renderer = tiny_loaded.renderer
    datum = supervised_datum(renderer, chat("42", weight=0.5), "row 0")
    prompt = renderer.render([{"role": "user", "content": "Say a number."}])
    reply = renderer.encode_text("42") + renderer.stop_token_ids[:1]
    assert datum.model_input.to_ints() + datum.loss_fn_inputs["target_tokens"].tolist()[-1:] == prompt + reply
    weights = datum.loss_fn_inputs["weights"].tolist()
    assert weights == [0.0] * (len(prompt) - 1) + [0.5] * len(reply)
    for bad, named in (
        ({"messages": [{"role": "user", "content": "hi"}]}, "ending in the assistant reply"),
        ({"prompt": "hi"}, "ending in the assistant reply"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}, "reply's text"),
        (chat("1", weight=0.0), "positive number"),
        (chat("1", weight="heavy"), "positive number"),
    ):
        with pytest.raises(DatasetError, match=f"row 7: .*{named}"):
            supervised_datum(renderer, bad, "row 7")


def test_a_run_learns_its_examples_before_the_first_rl_step_and_says_its_first_evaluation_is_not_untrained(
    tiny_model_dir, tmp_path
):
    tasks = [{"secret": s} for s in (3, 9)]
    warm_start = WarmStartConfig(
        dataset=DatasetConfig(tasks=[chat("7"), chat("7"), chat("12", weight=0.25)]),
        steps=30,
        batch_size=3,
        learning_rate=1e-2,
    )
    job = Job(
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=4),
        # The tiny model answers every prompt with the warm start's "7" afterwards, so its games may all tie.
        algorithm=AlgorithmConfig(group_size=2, batch_size=1, allow_nothing_trained=True),
        evaluation=EvaluationConfig(interval_steps=1),
        run_dir=tmp_path / "run",
        logging=QUIET,
        warm_start=warm_start,
    )
    job.set_workflow("sparring.envs.guess_number:guess_number").set_data(
        train=DatasetConfig(tasks=tasks, total_steps=1, workflow_args={"max_turns": 2}),
        eval=DatasetConfig(tasks=tasks, workflow_args={"max_turns": 2}),
    )
    result = job.tune()
    first = read_metrics(tmp_path / "run")[0]
    assert first["step"] == 0 and first["warm_start/steps"] == 30 and first["warm_start/examples"] == 3
    assert first["warm_start/loss_last"] < 0.5 * first["warm_start/loss_first"], first  # the replies were learned
    assert [column.label for column in result.comparison.columns][:2] == ["step 0", "trained"]
    weights = next(
        (tmp_path / "run" / "checkpoints").glob("lora-*/weights/warm-started")
    ).parent  # RL restarts the optimizer on the taught weights
    steps_of = {
        folder.name: json.loads((folder / "state.json").read_text())["optimizer_steps"] for folder in weights.iterdir()
    }
    assert steps_of["warm-started"] == 30 and steps_of["run-step-000001"] <= 1, steps_of
    config_file = (
        tmp_path / "run" / "config.yaml"
    )  # one step more, resumed: the checkpoint holds the warm start's result
    config_file.write_text(config_file.read_text().replace("total_steps: 1", "total_steps: 2"))
    Job.load_yaml(config_file).tune(resume=str(tmp_path / "run"))
    taught = [row["step"] for row in read_metrics(tmp_path / "run") if "warm_start/steps" in row]
    assert taught == [0] and read_metrics(tmp_path / "run")[-1]["step"] == 2


def test_warm_start_config_errors_name_the_field(tiny_model_dir):
    two = {"a": TunerModelConfig(model_path=str(tiny_model_dir)), "b": TunerModelConfig(model_path=str(tiny_model_dir))}
    examples = DatasetConfig(tasks=[chat("1")])
    with pytest.raises(ValueError, match="warm_start.model: several models train"):
        TuneConfig(models=two, warm_start=WarmStartConfig(dataset=examples, steps=1))
    with pytest.raises(ValueError, match="warm_start.model: no trainable model 'c'"):
        TuneConfig(models=two, warm_start=WarmStartConfig(dataset=examples, steps=1, model="c"))
    with pytest.raises(ValueError, match="steps"):
        WarmStartConfig(dataset=examples, steps=0)


def test_a_bad_warm_start_dataset_fails_when_the_run_is_resolved_before_any_model_is_looked_for(tmp_path):
    job = Job(
        model=TunerModelConfig(model_path=str(tmp_path / "no-such-model")),
        run_dir=tmp_path / "run",
        logging=QUIET,
        warm_start=WarmStartConfig(dataset=DatasetConfig(path=str(tmp_path / "missing.jsonl")), steps=1),
    )
    job.set_workflow("sparring.envs.guess_number:guess_number").set_data(
        train=DatasetConfig(tasks=[{"secret": 3}], total_steps=1, workflow_args={"max_turns": 2})
    )
    with pytest.raises(DatasetError, match=r"^warm_start\.dataset\.path: dataset path .*missing\.jsonl does not exist"):
        job.tune()
    assert not (tmp_path / "run").exists()


def test_a_packaged_games_warm_start_examples_are_read_from_its_folder():
    config = load_game_config("tictactoe", overrides=["warm_start.steps=1"])
    assert config.warm_start is not None and config.warm_start.dataset.path.endswith(
        "envs/tictactoe/data/move_examples.jsonl"
    )
    with pytest.raises(ConfigError, match="warm_start.steps"):
        load_game_config("tictactoe", overrides=["warm_start.steps=0"])
