"""Asynchronous off-policy training (`algorithm.max_staleness`) on the tiny model: every rollout samples exactly the
weights it should (N steps old, checked against the saved weights of each step), the staleness is logged and
bounded, evaluations and validations are barriers, snapshot opponents, a league, `validation:` and several trainable
models work, and a stopped run resumed with rollouts in flight is the same run as one never stopped."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    Job,
    LeagueConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    ValidationConfig,
    Workflow,
    WorkflowOutput,
    types,
)
from sparring.envs.tictactoe import make_tasks, tictactoe
from sparring.logging import read_metrics, read_rollouts
from sparring.logging.rollouts import sampled_spans
from sparring.trainer import ConfigError, TuneConfig, run_training

TASKS = [{"topic": f"topic {i}"} for i in range(4)]
EVAL_TASKS = [{"topic": f"held out {i}"} for i in range(2)]
QUIET = LoggingConfig(console=False, tensorboard=False)


async def versus_rival(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    replied = await auxiliary_models["rival"]([{"role": "user", "content": said.content or "hi"}])
    return WorkflowOutput(
        reward=(sum(said.tokens) + len(replied.tokens)) % 97 / 96
    )  # rarely equal in a group: every step trains


class TwoSpeakers(Workflow):
    trainable_targets = ["policy", "second"]

    async def execute(self, task, tuner):
        first = await tuner.chat_model("policy", target_tag="policy", model="policy")(
            [{"role": "user", "content": task["topic"]}]
        )
        second = await tuner.chat_model("second", target_tag="second", model="second")(
            [{"role": "user", "content": first.content or "hi"}]
        )
        return WorkflowOutput(reward={"policy": float(first.tokens[0] % 2), "second": float(second.tokens[0] % 3)})


def config(
    tiny_model_dir,
    run_dir,
    *,
    total_steps,
    max_staleness,
    workflow="tests.test_async_training:versus_rival",
    eval_every=0,
):
    model = TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=5, lora_rank=4)
    settings = dict(
        group_size=2,
        batch_size=2,
        learning_rate=2e-2,
        seed=5,
        drop_zero_variance_groups=False,
        max_staleness=max_staleness,
    )
    job = Job(
        model=model,
        auxiliary_models={"rival": TunerModelConfig(snapshot_of="policy", snapshot_interval_steps=2)},
        algorithm=AlgorithmConfig(**settings),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=eval_every),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=str(run_dir),
        logging=QUIET,
    )
    return (
        job.set_workflow(workflow)
        .set_data(train=DatasetConfig(tasks=TASKS, total_steps=total_steps), eval=EVAL_TASKS)
        .config
    )


def checkpoint_adapter(run_dir: Path, step: int) -> Path:
    state = json.loads((run_dir / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").read_text())
    return Path(state["models"]["policy"]) / "adapter"


def sampled(run_dir: Path, step: int) -> list[tuple[list[int], list[int], list[float]]]:
    """Each trained sequence of step `step`'s rollout (1-based, as metrics.jsonl): its tokens, where the policy sampled,
    and the sampler's logprobs."""
    rows = [row for row in read_rollouts(run_dir / "rollouts" / f"step_{step}.jsonl") if "agent" in row]
    return [
        (
            row["tokens"],
            [i for start, end in sampled_spans(row["loss_mask"]) for i in range(start, end)],
            row["logprobs"],
        )
        for row in rows
    ]


def largest_gap(scorer, sequences) -> float:
    """The largest difference between a sampler logprob and the logprob `scorer`'s weights give the same token."""
    gap = 0.0
    for tokens, positions, logprobs in sequences:
        scores = scorer.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        gap = max(gap, *(abs(scores[i] - logprobs[i]) for i in positions))
    return gap


def test_max_staleness_is_bounded_with_a_one_line_error():
    with pytest.raises(ConfigError, match=r"algorithm\.max_staleness") as raised:
        TuneConfig.from_dict({"algorithm": {"max_staleness": 17}})
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"algorithm\.max_staleness"):
        TuneConfig.from_dict({"algorithm": {"max_staleness": -1}})


@pytest.mark.timeout(240)
def test_each_rollout_samples_the_weights_of_n_steps_before_and_evaluations_are_barriers(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    result = run_training(config(tiny_model_dir, run_dir, total_steps=5, max_staleness=1, eval_every=3))
    assert result.steps == 5
    metrics = [m for m in read_metrics(run_dir) if "staleness/max" in m]
    # Step k trains on the rollout of version max(k - 1, last evaluation step); evaluations at steps 0 and 3.
    assert [m["staleness/max"] for m in metrics] == [0.0, 1.0, 1.0, 0.0, 1.0]
    assert all(m["staleness/mean"] == m["staleness/max"] for m in metrics)
    assert [e["step"] for e in result.evaluations] == [0, 3, 5]
    scorer = ServiceClient(base_dir=tmp_path / "scoring").create_lora_training_client(str(tiny_model_dir), rank=4)
    for step, version in [(2, 0), (3, 1), (5, 3)]:
        sequences = sampled(run_dir, step)
        assert sequences
        if version:  # the weights after `version` steps sampled this rollout; the newer weights of step - 1 did not
            assert (
                largest_gap(scorer.create_sampling_client(str(checkpoint_adapter(run_dir, version))), sequences) < 2e-3
            )
        assert largest_gap(scorer.create_sampling_client(str(checkpoint_adapter(run_dir, step - 1))), sequences) > 2e-2
    assert (
        largest_gap(scorer.create_sampling_client(str(checkpoint_adapter(run_dir, 3))), sampled(run_dir, 4)) < 2e-3
    )  # a barrier: fresh weights
    saved_versions = sorted(
        p.name
        for p in Path(json.loads((run_dir / "checkpoints" / "latest.json").read_text())["path"]).parent.parent.glob(
            "lora-*/sampler_weights/version-*"
        )
    )
    assert len(saved_versions) <= 3, saved_versions  # versions no rollout, snapshot or checkpoint needs are deleted


@pytest.mark.timeout(300)
def test_a_resumed_run_with_rollouts_in_flight_is_the_run_never_stopped(tiny_model_dir, tmp_path):
    straight = run_training(config(tiny_model_dir, tmp_path / "straight", total_steps=5, max_staleness=2))
    run_training(config(tiny_model_dir, tmp_path / "stopped", total_steps=3, max_staleness=2))
    state = json.loads((tmp_path / "stopped" / "checkpoints" / "step_000003" / "trainer_state.json").read_text())
    assert sorted(state["versions"]) == ["1", "2"]  # the rollouts of steps 3 and 4 sample these
    config_file = tmp_path / "stopped" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("total_steps: 3", "total_steps: 5"))
    resumed = Job.load_yaml(config_file).tune(resume=str(tmp_path / "stopped"))
    assert resumed.steps == 5
    runs = [[m for m in read_metrics(tmp_path / name) if "reward/mean" in m] for name in ("straight", "stopped")]
    assert [m["step"] for m in runs[1]] == [1, 2, 3, 4, 5]
    for key in ("reward/mean", "staleness/max", "snapshot/rival/age_steps", "train/loss"):
        assert [m[key] for m in runs[0]] == pytest.approx([m[key] for m in runs[1]], rel=1e-5, abs=1e-5), (
            key
        )  # float order: see below
    for step in range(4, 6):  # the rollouts sampled after the resume
        rows = [sampled(tmp_path / name, step) for name in ("straight", "stopped")]
        assert [(tokens, positions) for tokens, positions, _ in rows[0]] == [
            (tokens, positions) for tokens, positions, _ in rows[1]
        ]
        # Which rows share a sampling batch can differ after a resume, and with it the float order: ~1e-6 apart.
        assert [logprobs for *_, logprobs in rows[0]] == [pytest.approx(logprobs, abs=1e-5) for *_, logprobs in rows[1]]
    weights = [
        load_file(f"{path}/adapter_model.safetensors")
        for path in (straight.sampler_paths["policy"], resumed.sampler_paths["policy"])
    ]
    for key in weights[0]:
        assert weights[0][key].allclose(weights[1][key], atol=1e-5)


@pytest.mark.timeout(240)
def test_several_trainable_models_train_asynchronously(tiny_model_dir, tmp_path):
    model = TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=4)
    job = Job(
        models={"policy": model, "second": model},
        algorithm=AlgorithmConfig(
            group_size=2, batch_size=2, learning_rate=1e-2, drop_zero_variance_groups=False, max_staleness=1
        ),
        runner=RunnerConfig(episode_timeout_s=60),
        run_dir=str(tmp_path / "run"),
        logging=QUIET,
    )
    job.set_workflow(TwoSpeakers).set_data(train=DatasetConfig(tasks=TASKS, total_steps=3))
    result = job.tune()
    assert result.steps == 3 and set(result.sampler_paths) == {"policy", "second"}
    metrics = read_metrics(tmp_path / "run")
    assert [m["staleness/max"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all(m["train/policy/datums"] > 0 and m["train/second/datums"] > 0 for m in metrics)


@pytest.mark.timeout(300)
def test_a_league_and_validation_with_rollouts_running_ahead(tiny_model_dir, tmp_path):
    """max_staleness 1 with a league and `validation:` (due after steps 2 and 4): a validation is a barrier, so the
    rollouts of steps 1 and 3 sample the weights of the step before and those of 0 and 2 fresh ones; the league draws
    and counts every step's games and its snapshots copy the weights that sample the step's rollout."""
    run_dir = tmp_path / "run"
    job = Job(
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=4),
        league=LeagueConfig(snapshot_every_steps=1, max_snapshots=2, sampling="latest"),
        validation=ValidationConfig(
            dataset=DatasetConfig(tasks=make_tasks("eval", 2, seed=2)),
            every_steps=2,
            from_step=2,
            metric="workflow/win_rate",
        ),
        algorithm=AlgorithmConfig(
            group_size=2,
            batch_size=2,
            learning_rate=1e-3,
            rollout_temperature_floor=1.0,
            allow_nothing_trained=True,
            max_staleness=1,
        ),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=2),
        run_dir=str(run_dir),
        logging=QUIET,
    )
    job.set_workflow(tictactoe).set_data(
        train=DatasetConfig(
            tasks=make_tasks("train", 4, seed=1), total_steps=4, workflow_args={"memory": "turn", "move_credit": 0.5}
        )
    )
    result = job.tune()
    assert result.steps == 4 and result.best is not None
    assert [entry["steps"] for entry in json.loads((run_dir / "validation.json").read_text())["validations"]] == [2, 4]
    steps = [m for m in read_metrics(run_dir) if "reward/mean" in m]
    # One weights version samples a whole rollout: within a step the mean age of its episodes is the largest one.
    assert [m["staleness/max"] for m in steps] == [0.0, 1.0, 0.0, 1.0]
    assert [m["staleness/mean"] for m in steps] == [m["staleness/max"] for m in steps]
    # Across the run they differ: the barriers' steps trained fresh rollouts.
    assert sum(m["staleness/mean"] for m in steps) / len(steps) == 0.5 < max(m["staleness/max"] for m in steps)
    for step, metrics in enumerate(steps):
        assert metrics[f"league/snapshot-{step}/games"] == 4  # 'latest': the snapshot taken at the step's start
    state = json.loads((run_dir / "checkpoints" / "step_000004" / "trainer_state.json").read_text())
    # snapshot-3 copies the weights that sampled the rollout of step 3: those of step 2, not the live ones.
    assert [(s["name"], s["step"]) for s in state["league"]["snapshots"]] == [("snapshot-2", 2), ("snapshot-3", 2)]
    assert all(Path(s["path"]).is_dir() for s in state["league"]["snapshots"])  # kept while the pool plays them
