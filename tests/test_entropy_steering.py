"""Entropy steering: the rule that moves the entropy bonus's coefficient towards a target entropy, its config checks,
and a run on the tiny model whose every update logs the coefficient the rule gave it, resumed from the last one."""

import math

import pytest

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    TunerModelConfig,
    tune,
)
from sparring.algorithms import EntropySteering
from sparring.engine.losses import LOSSES, register_loss
from sparring.envs.tictactoe import make_tasks, tictactoe
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, TuneConfig
from sparring.trainer.sections import EntropyTargetConfig


def test_the_coefficient_rises_below_the_target_falls_above_it_within_its_bounds():
    steering = EntropySteering(target=0.3, rate=2.0, low=0.01, high=0.5, coef=0.1)
    assert steering.step(0.1) == pytest.approx(0.1 * math.exp(0.4))  # too sharp: a stronger bonus
    assert steering.step(0.3) == pytest.approx(0.1 * math.exp(0.4))  # on target: unchanged
    assert steering.step(None) == pytest.approx(0.1 * math.exp(0.4))  # no sampled token: unchanged
    assert steering.step(1.3) == pytest.approx(0.1 * math.exp(0.4) * math.exp(-2.0))  # too loose: weaker
    assert steering.step(5.0) == 0.01 and steering.step(-10.0) == 0.5  # clipped to [low, high]


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (
            {"entropy_target": {"target": 0.3}, "loss_fn_config": {"entropy_coef": 0.1}},
            "remove loss_fn_config.entropy_coef",
        ),
        ({"entropy_target": {"target": 0.3, "initial_coef": 2.0}}, "min_coef <= initial_coef <= max_coef"),
        ({"entropy_target": {"target": 0.0}}, "entropy_target.target"),
        ({"entropy_target": {"taget": 0.3}}, "entropy_target.taget"),
    ],
)
def test_a_bad_entropy_target_is_a_config_error_naming_it(algorithm, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        TuneConfig.from_dict({"algorithm": algorithm})


def test_every_update_trains_with_its_steered_coefficient_and_a_resumed_run_continues_from_the_last(
    tiny_model_dir, tmp_path
):
    coefficients_seen = []

    def recording_ppo(target_logprobs, inputs, config):
        coefficients_seen.append(config["entropy_coef"])
        return LOSSES["ppo"].fn(target_logprobs, inputs, config)

    register_loss("ppo_recording_entropy_coef", recording_ppo)
    target = EntropyTargetConfig(target=0.5, rate=3.0, initial_coef=0.05, min_coef=0.001, max_coef=10.0)
    tune(
        workflow_func=tictactoe,
        train_dataset=DatasetConfig(
            tasks=make_tasks("train", 6, seed=1),
            total_steps=2,
            workflow_args={"opponent": "random", "memory": "turn", "move_credit": 0.5},
        ),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=4),
        algorithm=AlgorithmConfig(
            group_size=4, batch_size=2, learning_rate=1e-3, loss_fn="ppo_recording_entropy_coef", entropy_target=target
        ),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    config_file = tmp_path / "run" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("total_steps: 2", "total_steps: 3"))
    Job.load_yaml(config_file).tune(resume=str(tmp_path / "run"))
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/mean" in m]
    assert len(steps) == 3 and all(m["tokens/trained"] > 0 for m in steps)
    coef = target.initial_coef
    for metrics in steps:  # the resumed third step steers from the second's coefficient, not from initial_coef
        coef = min(
            max(coef * math.exp(target.rate * (target.target - metrics["collapse/entropy"])), target.min_coef),
            target.max_coef,
        )
        assert metrics["optim/entropy_coef"] == pytest.approx(coef, rel=1e-9)
    assert len({round(m["optim/entropy_coef"], 12) for m in steps}) == 3  # it moved every step
    assert list(dict.fromkeys(coefficients_seen)) == [m["optim/entropy_coef"] for m in steps]  # what the loss was given
