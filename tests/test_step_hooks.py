"""Step hooks on the tiny model: one hook sees every step's start and end, in order, with the weights version that
samples the rollout, on-policy and with rollouts running ahead (max_staleness 1); its metrics are logged; a hook
named in a config is built and run; a bad one is a config error naming `step_hooks`."""

import asyncio

import pytest

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    StepEnd,
    StepHook,
    StepStart,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, TuneConfig
from sparring.trainer.config_file import check_names

TASKS = [{"topic": f"topic {i}"} for i in range(4)]
EVAL_TASKS = [{"topic": "held out"}]
QUIET = LoggingConfig(console=False, tensorboard=False)


async def speak(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=float(said.tokens[0] % 3))


class Recorder(StepHook):
    """Records what it sees; its after-training half is async and adds a metric."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def before_rollout(self, start: StepStart) -> None:
        self.events.append(("before", start.step, start.weights_version, len(start.tasks)))

    async def after_training(self, end: StepEnd) -> dict[str, float]:
        await asyncio.sleep(0)
        self.events.append(("after", end.step, len(end.episodes), "reward/mean" in end.metrics))
        return {"hook/steps_seen": float(sum(event[0] == "after" for event in self.events))}


class Counter(StepHook):
    """A hook a config names by import path (built with no arguments)."""

    def after_training(self, end: StepEnd) -> dict[str, float]:
        return {"hook/counted_step": float(end.step + 1)}


class NeedsArguments(StepHook):
    def __init__(self, label: str) -> None:
        self.label = label


def job(tiny_model_dir, run_dir, max_staleness: int, **fields) -> Job:
    algorithm = AlgorithmConfig(
        group_size=2,
        batch_size=2,
        learning_rate=1e-2,
        seed=3,
        drop_zero_variance_groups=False,
        max_staleness=max_staleness,
    )
    built = Job(
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=4),
        algorithm=algorithm,
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=str(run_dir),
        logging=QUIET,
    )
    built.set_workflow(speak).set_data(train=DatasetConfig(tasks=TASKS, total_steps=3), eval=EVAL_TASKS)
    if fields:
        built.config = TuneConfig(**{**dict(built.config), **fields})
    return built


@pytest.mark.parametrize("max_staleness, versions", [(0, [0, 1, 2]), (1, [0, 0, 1])], ids=["on-policy", "staleness-1"])
def test_a_hook_sees_every_step_start_and_end_in_order_and_its_metrics_are_logged(
    tiny_model_dir, tmp_path, max_staleness, versions
):
    recorder = Recorder()
    result = job(tiny_model_dir, tmp_path / "run", max_staleness).tune(hooks=[recorder])
    befores = [event for event in recorder.events if event[0] == "before"]
    afters = [event for event in recorder.events if event[0] == "after"]
    assert befores == [("before", step, version, 2) for step, version in zip(range(3), versions, strict=True)]
    assert afters == [("after", step, 4, True) for step in range(3)]
    for step in range(3):  # a step's rollout begins before it ends; with staleness the next may begin earlier
        assert recorder.events.index(befores[step]) < recorder.events.index(afters[step])
    logged = [record["hook/steps_seen"] for record in read_metrics(result.run_dir) if "hook/steps_seen" in record]
    assert logged == [1.0, 2.0, 3.0]


def test_a_config_names_a_hook_by_import_path_and_tune_adds_its_own(tiny_model_dir, tmp_path):
    built = job(tiny_model_dir, tmp_path / "run", 0, step_hooks=["tests.test_step_hooks:Counter"])
    recorder = Recorder()
    result = tune(
        speak,
        train_dataset=built.config.train_dataset,
        model=built.config.model,
        algorithm=built.config.algorithm,
        eval_dataset=EVAL_TASKS,
        run_dir=tmp_path / "tuned",
        logging=QUIET,
        step_hooks=[recorder],
    )
    assert len(recorder.events) == 6
    assert not any(
        "hook/counted_step" in record for record in read_metrics(tmp_path / "tuned")
    )  # tune() was given no config hook
    built.tune()
    assert [
        record["hook/counted_step"] for record in read_metrics(tmp_path / "run") if "hook/counted_step" in record
    ] == [1.0, 2.0, 3.0]
    assert result.steps == 3


@pytest.mark.parametrize(
    "path, message",
    [
        ("tests.test_step_hooks:Missing", r"step_hooks\[0\]: .*Missing"),
        ("tests.test_step_hooks:speak", r"step_hooks\[0\]: .*neither `before_rollout` nor `after_training`"),
        ("tests.test_step_hooks:NeedsArguments", r"step_hooks\[0\]: the class .* needs constructor arguments"),
    ],
)
def test_a_bad_hook_in_a_config_is_a_config_error_naming_it(path, message):
    with pytest.raises(ConfigError, match=message) as raised:
        check_names(TuneConfig.from_dict({"step_hooks": [path]}))
    assert "\n" not in str(raised.value)
