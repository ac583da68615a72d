"""A loss and an advantage function named by import path: the tiny model trains with them (they run, and what they
return is what trains), a broken one is a one-line config error naming the field (tests/test_config_errors.py meets
two through the command
line, before any model loads), and the Tinker-protocol server never imports a module a client names as its loss.
`custom_algorithms` (tests/custom_algorithms.py) is the user's module; tests/ is on sys.path under pytest."""

from __future__ import annotations

import asyncio
import sys

import custom_algorithms as custom
import httpx
import pytest
import torch
import yaml

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.algorithms import ADVANTAGE_ESTIMATORS, compute_advantages
from sparring.engine import LossSpec, register_loss
from sparring.engine.losses import LOSSES, elementwise_loss
from sparring.logging import read_metrics
from sparring.rollout.types import Episode, Timeline
from sparring.server import create_app
from sparring.trainer import ConfigError, TuneConfig
from sparring.trainer.config_file import check_names
from sparring.types import Datum, ModelInput

LOSS = "custom_algorithms:plain_policy_gradient"
ESTIMATOR = "custom_algorithms:fixed_advantage"


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """What a test registers is gone after it, so other test files see the built-in names only."""
    saved = [(registry, dict(registry)) for registry in (LOSSES, ADVANTAGE_ESTIMATORS)]
    yield
    for registry, entries in saved:
        registry.clear()
        registry.update(entries)


async def say_something(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=float(len(said.tokens)))


def test_the_tiny_model_trains_with_a_loss_and_an_advantage_function_given_by_import_path(tiny_model_dir, tmp_path):
    custom.CALLS.clear()
    custom.SEEN_ADVANTAGES.clear()
    steps, tasks_per_step = 2, 2
    result = tune(
        workflow_func=say_something,
        train_dataset=DatasetConfig(tasks=[{"topic": f"topic {i}"} for i in range(4)], total_steps=steps),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4),
        algorithm=AlgorithmConfig(
            algorithm_type=ESTIMATOR,
            loss_fn=LOSS,
            group_size=2,
            batch_size=tasks_per_step,
            learning_rate=1e-2,
            drop_zero_variance_groups=False,
        ),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == steps
    assert custom.CALLS["fixed_advantage"] == steps * tasks_per_step  # one group per task
    assert [m["advantage/mean"] for m in read_metrics(tmp_path / "run")] == [custom.FIXED_ADVANTAGE] * steps
    assert custom.CALLS["plain_policy_gradient"] >= steps
    seen = torch.cat(custom.SEEN_ADVANTAGES)
    assert set(seen[seen != 0].tolist()) == {custom.FIXED_ADVANTAGE}  # the estimator's advantages reached the loss
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["algorithm"]
    assert (written["algorithm_type"], written["loss_fn"]) == (ESTIMATOR, LOSS)  # so a resumed run imports them again


def test_a_loss_spec_by_import_path_brings_its_own_config_keys():
    config = TuneConfig(
        algorithm={"loss_fn": "custom_algorithms:scaled_policy_gradient", "loss_fn_config": {"scale": 2.0}}
    )
    check_names(config)
    assert config.algorithm.loss_fn_config == {"scale": 2.0}
    with pytest.raises(
        ConfigError,
        match=r"algorithm\.loss_fn_config: loss_fn_config keys \['scale'\] are not used by "
        r"'custom_algorithms:plain_policy_gradient'",
    ):
        check_names(TuneConfig(algorithm={"loss_fn": LOSS, "loss_fn_config": {"scale": 2.0}}))
    check_names(
        TuneConfig(algorithm={"loss_fn": LOSS, "loss_fn_config": {"entropy_coef": 0.01}})
    )  # the entropy term rides along any RL loss


@pytest.mark.parametrize(
    "field, path, problem",
    [
        (
            "loss_fn",
            "no_such_module_xyz:loss",
            "cannot import 'no_such_module_xyz:loss': no module named 'no_such_module_xyz'",
        ),
        ("loss_fn", "custom_algorithms:no_such_loss", "custom_algorithms has no attribute 'no_such_loss'"),
        ("loss_fn", "custom_algorithms:", "write it as 'package.module:name'"),
        (
            "loss_fn",
            "custom_algorithms:NOT_A_FUNCTION",
            "is a int, not a loss function loss(target_logprobs, inputs, config)",
        ),
        (
            "loss_fn",
            "custom_algorithms:one_argument_loss",
            "takes (target_logprobs_M: 'torch.Tensor') -> 'torch.Tensor', but a loss is called as "
            "loss(target_logprobs, inputs, config): too many positional arguments",
        ),
        ("loss_fn", "custom_algorithms:weighted_likelihood", "is not a loss the RL loop trains with"),
        ("loss_fn", "ppo2", "is not a loss the RL loop trains with"),
        ("algorithm_type", "no_such_module_xyz:advantages", "cannot import 'no_such_module_xyz:advantages'"),
        (
            "algorithm_type",
            "custom_algorithms:NOT_A_FUNCTION",
            "is a int, not an advantage function estimator(rewards_G, *, normalize_by_std)",
        ),
        (
            "algorithm_type",
            "custom_algorithms:positional_only_estimator",
            "but an advantage function is called as estimator(rewards_G, *, normalize_by_std): got an "
            "unexpected keyword argument 'normalize_by_std'",
        ),
        (
            "algorithm_type",
            "gpro",
            "unknown advantage estimator 'gpro'; choose one of ['grpo', 'multi_step_grpo', 'reinforce', 'rloo'",
        ),
    ],
)
def test_a_bad_import_path_is_a_config_error_naming_the_field_and_the_problem(field, path, problem):
    with pytest.raises(ConfigError) as caught:
        check_names(TuneConfig(algorithm={field: path}))
    message = str(caught.value)
    assert message.startswith(f"algorithm.{field}: ") and problem in message and "\n" not in message, message


def test_a_custom_loss_cannot_train_on_a_tinker_service():
    with pytest.raises(
        ConfigError,
        match=r"algorithm\.loss_fn: .*plain_policy_gradient.*\['policy'\] train on a Tinker-protocol service",
    ):
        TuneConfig(model={"backend": "tinker", "base_url": "http://127.0.0.1:1"}, algorithm={"loss_fn": LOSS})


def test_what_a_custom_function_returns_is_checked_where_it_is_used():
    check_names(
        TuneConfig(
            algorithm={
                "loss_fn": "custom_algorithms:summed_loss",
                "algorithm_type": "custom_algorithms:one_number_estimator",
            }
        )
    )
    logprobs_M = torch.tensor([-1.0, -2.0, -0.5])
    inputs = {
        "target_tokens": torch.tensor([1, 2, 3]),
        "logprobs": logprobs_M,
        "advantages": torch.tensor([0.0, 1.0, 1.0]),
    }
    with pytest.raises(
        ValueError,
        match=r"loss_fn 'custom_algorithms:summed_loss' returned shape \[\]; a loss returns one value per token, "
        r"shape \[3\]",
    ):
        elementwise_loss("custom_algorithms:summed_loss", logprobs_M, inputs, {})
    with pytest.raises(
        ValueError,
        match=r"estimator 'custom_algorithms:one_number_estimator' returned a float; it returns one advantage "
        r"per reward, shape \[2\]",
    ):
        compute_advantages([one_call_episode(1.0), one_call_episode(0.0)], "custom_algorithms:one_number_estimator")


def one_call_episode(reward: float) -> Episode:
    timeline = Timeline(agent="a", model="policy", tokens=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.25])
    return Episode(task={}, group=0, timelines=[timeline], rewards={"a": reward})


def test_a_loss_registered_in_python_trains_through_the_low_level_api_on_an_input_of_its_own(tiny_model_dir, tmp_path):
    def masked_likelihood(target_logprobs_M, inputs, config):
        return -inputs["token_mask"] * target_logprobs_M

    register_loss(
        "test_masked_likelihood",
        LossSpec(masked_likelihood, ("target_tokens", "token_mask"), (), gradient_input="token_mask"),
    )
    training = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=2, seed=0)
    datum = Datum(
        model_input=ModelInput.from_ints([4, 5, 6]),
        loss_fn_inputs={"target_tokens": [5, 6, 7], "token_mask": [0.0, 1.0, 1.0]},
    )
    output = training.forward_backward([datum], "test_masked_likelihood").result()
    logprobs_N = output.loss_fn_outputs[0]["logprobs"].to_torch()
    assert output.loss_fn_outputs[0]["elementwise_loss"].to_torch().tolist() == pytest.approx(
        (-torch.tensor([0.0, 1.0, 1.0]) * logprobs_N).tolist()
    )


def test_the_tinker_server_never_imports_the_module_a_client_names_as_its_loss(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "planted_loss.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\ndef loss(target_logprobs, inputs, config):\n  "
        "  return -target_logprobs\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = create_app(str(tiny_model_dir), base_dir=tmp_path / "base")
    tokens = {"data": [5, 6, 7], "dtype": "int64", "shape": [3]}
    datum = {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": [4, 5, 6]}]},
        "loss_fn_inputs": {"target_tokens": tokens, "weights": {"data": [1.0] * 3, "dtype": "float32"}},
    }

    async def calls():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:

            async def result(answer: httpx.Response) -> dict:
                while (
                    reply := (
                        await client.post("/api/v1/retrieve_future", json={"request_id": answer.json()["request_id"]})
                    ).json()
                ).get("type") == "try_again":
                    await asyncio.sleep(0.05)
                return reply

            session = (await client.post("/api/v1/create_session", json={})).json()["session_id"]
            created = await client.post(
                "/api/v1/create_model",
                json={
                    "session_id": session,
                    "model_seq_id": 0,
                    "base_model": str(tiny_model_dir),
                    "lora_config": {"rank": 2},
                },
            )
            model_id = (await result(created))["model_id"]
            planted = await client.post(
                "/api/v1/forward_backward",
                json={
                    "model_id": model_id,
                    "seq_id": 1,
                    "forward_backward_input": {"data": [datum], "loss_fn": "planted_loss:loss"},
                },
            )
            return await result(planted)

    reply = asyncio.run(calls())
    assert "unknown loss_fn 'planted_loss:loss'" in str(reply), reply
    assert not (tmp_path / "imported").exists() and "planted_loss" not in sys.modules
