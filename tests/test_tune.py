"""tune() / Job end to end on the tiny model: both workflow styles train, only trainable agents get loss,
crashes become data, kill-and-resume continues exactly, bad configs fail before any model loads."""

import json

import pytest
from safetensors.torch import load_file

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    TunerModelConfig,
    Workflow,
    WorkflowOutput,
    tune,
)
from sparring.engine.engine import _ENGINES
from sparring.logging import read_metrics, read_rollouts
from sparring.trainer import ConfigError, EpisodesFailingError, run_training

TASKS = [{"topic": f"topic {i}"} for i in range(4)]
QUIET = LoggingConfig(console=False, tensorboard=False)


def fast_run(checkpoint_every: int = 0, runner: RunnerConfig | None = None, **overrides) -> dict:
    """The algorithm and the run's sections of a short run: `tune(..., **fast_run())`."""
    settings = dict(group_size=2, batch_size=2, learning_rate=1e-3)
    return dict(
        algorithm=AlgorithmConfig(**{**settings, **overrides}),
        runner=runner or RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=checkpoint_every),
    )


def model_config(tiny_model_dir):
    return TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4)


async def chat_with_helper(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    await auxiliary_models["helper"]([{"role": "user", "content": said.content or "hello"}])
    return WorkflowOutput(reward=float(said.tokens[0] % 2), metrics={"length": float(len(said.tokens))})


class ChatWithHelper(Workflow):
    trainable_targets = ["speaker"]

    async def execute(self, task, tuner):
        speaker = tuner.chat_model("speaker", target_tag="speaker")
        helper = tuner.chat_model("helper", target_tag="helper", debug_model="helper")
        said = await speaker([{"role": "user", "content": task["topic"]}])
        await helper([{"role": "user", "content": said.content or "hello"}])
        return WorkflowOutput(reward={"speaker": float(said.tokens[0] % 2)})


def adapter_weights(result):
    (path,) = result.sampler_paths.values()
    return load_file(f"{path}/adapter_model.safetensors")


@pytest.mark.parametrize("workflow, trained_agent", [(chat_with_helper, "policy"), (ChatWithHelper, "speaker")])
def test_both_styles_train_and_only_the_trainable_agent_gets_loss(tiny_model_dir, tmp_path, workflow, trained_agent):
    result = tune(
        workflow_func=workflow,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2),
        model=model_config(tiny_model_dir),
        auxiliary_models={"helper": model_config(tiny_model_dir)},
        **fast_run(drop_zero_variance_groups=False),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 2 and not result.interrupted
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2]
    assert {
        "reward/mean",
        f"agent/{trained_agent}/reward",
        "time/rollout",
        "time/train",
        "timeline/merge_rate",
        "tokens/trained",
    } <= set(metrics[0])
    rows = read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl")
    assert rows and {row["agent"] for row in rows if "agent" in row} == {trained_agent}
    for row in rows:
        if "agent" in row:
            assert len(row["tokens"]) == len(row["loss_mask"]) == len(row["logprobs"])
    assert any(value.abs().sum() > 0 for key, value in adapter_weights(result).items() if "lora_B" in key)
    assert (tmp_path / "run" / "config.yaml").exists()


async def sometimes_crashes(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    if task["topic"].endswith("1"):
        raise RuntimeError("scripted failure")
    return WorkflowOutput(reward=float(len(said.tokens)))


def test_crashing_episodes_are_penalised_and_the_run_goes_on(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=sometimes_crashes,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2, shuffle=False),
        model=model_config(tiny_model_dir),
        # every group's rewards are equal: nothing to train
        **fast_run(runner=RunnerConfig(episode_timeout_s=60, error_reward=-0.5), allow_nothing_trained=True),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 2
    first = read_metrics(tmp_path / "run")[0]
    assert first["episode/error_rate"] == pytest.approx(0.5)  # topics 0 and 1 in the first batch; 1 crashes


def resumable_config(tiny_model_dir, run_dir, total_steps):
    job = Job(
        model=model_config(tiny_model_dir),
        **fast_run(checkpoint_every=1, seed=3),
        run_dir=run_dir,
        logging=QUIET,
    )
    job.set_workflow("tests.test_tune:chat_alone").set_data(train=DatasetConfig(tasks=TASKS, total_steps=total_steps))
    return job.config


async def chat_alone(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=sum(said.tokens) % 97 / 96)  # rarely equal in a group: every step trains


def test_kill_and_resume_continues_exactly(tiny_model_dir, tmp_path):
    straight = run_training(resumable_config(tiny_model_dir, tmp_path / "straight", 4))
    stopped = run_training(resumable_config(tiny_model_dir, tmp_path / "stopped", 2))
    assert stopped.steps == 2
    # A "killed" run: its config says 4 steps, its last checkpoint is at step 2.
    config_file = tmp_path / "stopped" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("total_steps: 2", "total_steps: 4"))
    resumed = Job.load_yaml(config_file).tune(resume=str(tmp_path / "stopped"))
    assert resumed.steps == 4
    assert [m["step"] for m in read_metrics(tmp_path / "stopped")] == [1, 2, 3, 4]
    rewards = [[m["reward/mean"] for m in read_metrics(tmp_path / name)] for name in ("straight", "stopped")]
    assert rewards[0] == pytest.approx(rewards[1], abs=1e-6)
    weights = [adapter_weights(run) for run in (straight, resumed)]
    for key in weights[0]:
        assert weights[0][key].allclose(weights[1][key], atol=1e-5)
    latest = json.loads((tmp_path / "stopped" / "checkpoints" / "latest.json").read_text())
    assert latest["path"].endswith("step_000004")


def test_bad_configs_and_workflows_fail_before_any_model_loads(tmp_path):
    with pytest.raises(ConfigError, match="algorithm.group_size"):
        Job(model=TunerModelConfig(model_path="does-not-exist"), algorithm={"group_size": 0})

    async def wrong(task, model):
        return WorkflowOutput(reward=0.0)

    with pytest.raises(TypeError, match="auxiliary_models"):
        tune(
            workflow_func=wrong,
            train_dataset=DatasetConfig(tasks=TASKS),
            model=TunerModelConfig(model_path="does-not-exist"),
            run_dir=tmp_path / "run",
            logging=QUIET,
        )


def test_kl_penalty_to_the_base_model_is_applied(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=chat_alone,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2),
        model=model_config(tiny_model_dir),
        **fast_run(kl_coef=0.5, drop_zero_variance_groups=False),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    metrics = read_metrics(tmp_path / "run")
    assert result.steps == 2 and all("kl/policy_base" in m for m in metrics)
    assert metrics[0]["kl/policy_base"] == pytest.approx(0.0, abs=1e-3)  # the adapter starts equal to the base model


def test_a_run_shows_no_warning_or_loading_bar_from_dependencies(tiny_model_dir, tmp_path, capfd):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune(
            workflow_func=chat_alone,
            train_dataset=DatasetConfig(tasks=TASKS, total_steps=1),
            model=model_config(tiny_model_dir),
            **fast_run(),
            run_dir=tmp_path / "run",
            logging=QUIET,
        )
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert "Loading weights" not in capfd.readouterr().err


def engine_adapters() -> int:
    return sum(len(engine.bank.adapters) for engine in _ENGINES.values())


def test_a_finished_or_failed_run_leaves_no_adapter_on_the_shared_engine(tiny_model_dir, tmp_path):
    """Runs in one process share one engine per base model: each frees its adapters once its weights are saved."""
    before = engine_adapters()
    result = tune(
        workflow_func=chat_with_helper,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2),
        model=model_config(tiny_model_dir),
        auxiliary_models={"helper": model_config(tiny_model_dir)},
        **fast_run(drop_zero_variance_groups=False),
        run_dir=tmp_path / "finished",
        logging=QUIET,
    )
    assert result.steps == 2 and engine_adapters() == before
    assert any(value.abs().sum() > 0 for key, value in adapter_weights(result).items() if "lora_B" in key)
    with pytest.raises(EpisodesFailingError, match="scripted failure"):
        tune(
            workflow_func=always_fails,
            train_dataset=DatasetConfig(tasks=TASKS, total_steps=1),
            model=model_config(tiny_model_dir),
            **fast_run(),
            run_dir=tmp_path / "failed",
            logging=QUIET,
        )
    assert engine_adapters() == before


async def always_fails(task, model, auxiliary_models):
    await model([{"role": "user", "content": task["topic"]}])
    raise RuntimeError("scripted failure")
