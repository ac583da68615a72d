"""AgentScope's tuner multi-agent tutorial (examples/agentscope_werewolf.py) on sparring, for each AgentScope major.

The models a function-style workflow receives are both sparring chat models and the installed AgentScope's
`ChatModelBase`, so the tutorial hands them straight to its agents. Runs in-process against AgentScope 2.x
and, through `test_agentscope1_runs_this_module`, once more against AgentScope 1.x (`agentscope_suite`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("agentscope")

import numpy as np  # noqa: E402
from agentscope.model import ChatModelBase  # noqa: E402
from agentscope_suite import in_agentscope1_subprocess, load_example, run_on_agentscope1  # noqa: E402
from scripted_sampler import ScriptedSampler  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from sparring import (  # noqa: E402
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    TunerHandle,
    TunerModelConfig,
    tune,
)
from sparring.integrations import agentscope_major, agentscope_model  # noqa: E402
from sparring.logging import read_rollouts  # noqa: E402
from sparring.models import get_renderer  # noqa: E402
from sparring.rollout import (  # noqa: E402
    ChatModel,
    ChatResponse,
    FrozenChatModel,
    ModelRouter,
    PolicyChatModel,
    RunnerSettings,
    as_episode_fn,
    run_episodes,
)

MAJOR = agentscope_major()


EXAMPLE = load_example("agentscope_werewolf")


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    return get_renderer(AutoTokenizer.from_pretrained(tiny_model_dir))


def scripted_tuner(renderer, reply: str = "I suspect Player1.") -> TunerHandle:
    policy = PolicyChatModel(ScriptedSampler(renderer, [reply] * 200))
    participant = FrozenChatModel(ScriptedSampler(renderer, [reply] * 200), agent="participant")
    return TunerHandle(policies={"policy": policy}, auxiliary_models={"participant": participant})


def roles_of(seed: int) -> dict[str, str]:
    """The tutorial's deal: the same numpy shuffle of the same roles."""
    roles = ["werewolf"] * 2 + ["villager"] * 3 + ["seer", "witch"]
    np.random.seed(seed)
    np.random.shuffle(roles)
    return {f"Player{i + 1}": role for i, role in enumerate(roles)}


def test_a_workflow_gets_models_that_are_agentscope_and_sparring_models(renderer):
    tuner = scripted_tuner(renderer, "hello")
    model, auxiliary = tuner.workflow_model(tuner.policy), tuner.workflow_auxiliary_models()
    participant = auxiliary["participant"]
    for received in (model, participant):
        assert isinstance(received, ChatModelBase) and isinstance(received, ChatModel)
    assert model.trainable and not participant.trainable and participant.agent == "participant"

    reply = asyncio.run(model([{"role": "user", "content": "hi"}]))  # a sparring call: a sparring reply
    assert isinstance(reply, ChatResponse) and reply.content == "hello"

    named = model.as_agent("Player3", "werewolf")
    assert isinstance(named, ChatModelBase) and (named.agent, named.role, named.trainable) == (
        "Player3",
        "werewolf",
        True,
    )
    if MAJOR == 2:
        assert model.formatter.agent_name is None and named.formatter.agent_name == "Player3"
    assert agentscope_model(model).chat_model is tuner.policy  # wrapping it again wraps the routed model
    plain = ModelRouter(policies={"policy": tuner.policy})
    assert plain.workflow_model(tuner.policy) is tuner.policy  # the rollout layer's router hands models out as they are


def test_the_tutorial_workflow_routes_by_role_and_merges_each_agents_turns(renderer):
    seed = 3
    task = {"task_id": "0", "seed": seed, "workflow_args": {"trainable_target": "good_guy"}}
    (episode,) = asyncio.run(
        run_episodes(
            as_episode_fn(EXAMPLE.werewolf_workflow),
            [task],
            lambda: scripted_tuner(renderer),
            RunnerSettings(group_size=1),
        )
    )
    assert episode.error is None and episode.metrics["success"] == 1.0 and episode.metrics.get("error", 0.0) == 0.0

    roles = roles_of(seed)
    speakers = set()
    for timeline in episode.timelines:
        (player,) = {name for name in roles if f"You are {name} " in renderer.decode(timeline.tokens)}
        assert roles[player] != "werewolf"  # trainable_target good_guy: only good players call the trained model
        assert timeline.num_calls >= 2  # a player's calls merge into one sequence
        speakers.add(player)
    # One sequence per player; every good player but one the werewolves may kill before it speaks.
    assert len(speakers) == len(episode.timelines) >= sum(role != "werewolf" for role in roles.values()) - 1
    assert episode.num_calls == sum(timeline.num_calls for timeline in episode.timelines)


def test_the_tutorial_trains_one_step_on_the_tiny_model(tiny_model_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"seed": seed}) + "\n" for seed in range(2)))
    sampling = {"max_model_len": 1024, "max_tokens": 4}
    result = tune(
        workflow_func=EXAMPLE.werewolf_workflow,
        judge_func=None,
        train_dataset=DatasetConfig(
            path=str(data), split="train", total_steps=1, workflow_args={"trainable_target": "werewolf"}
        ),
        model=TunerModelConfig(model_path=str(tiny_model_dir), lora_rank=4, **sampling),
        auxiliary_models={"participant": TunerModelConfig(model_path=str(tiny_model_dir), **sampling)},
        algorithm=AlgorithmConfig(
            algorithm_type="multi_step_grpo",
            group_size=2,
            batch_size=1,
            learning_rate=1e-3,
            drop_zero_variance_groups=False,
            allow_nothing_trained=True,
        ),
        runner=RunnerConfig(episode_timeout_s=240),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(
            interval_steps=0
        ),  # the tiny model's games may all end alike: this checks the plumbing
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 1
    (metrics,) = [
        json.loads(line)
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        if '"workflow/success"' in line
    ]
    assert metrics["workflow/success"] == 1.0 and metrics["train/datums"] > 0  # every game played through, then trained
    rows = [row for row in read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl") if "agent" in row]
    assert len(rows) == 4 and not any(row["error"] for row in rows)  # 2 games x 2 werewolves, one sequence each
    assert all(row["num_calls"] >= 3 and sum(row["loss_mask"]) > 0 for row in rows)  # night, speech, vote at least


@pytest.mark.skipif(MAJOR == 1 or in_agentscope1_subprocess(), reason="runs from the AgentScope 2.x suite")
def test_agentscope1_runs_this_module():
    run_on_agentscope1(Path(__file__))


def test_the_installed_agentscope_is_the_one_under_test():
    assert MAJOR == (1 if in_agentscope1_subprocess() else 2)
