"""AgentJet's spellings on sparring, on the tiny model.

`ExampleWerewolves` has the shape of AgentJet's werewolf workflow class: a `Workflow` subclass declaring
`trainable_targets` as a pydantic `Field`, `execute(self, workflow_task: WorkflowTask, tuner: AjetTuner)` reading
`workflow_task.task.metadata["random_number"]`, players built with the handle's AgentJet methods
(`as_raw_openai_sdk_client`, `as_oai_baseurl_apikey`), the error penalty, and `WorkflowOutput(reward=...,
is_success=...)`. Only the import line differs from AgentJet's (`from ajet import ...`); the game is a short
one (one night, one vote) so that a step on the tiny model takes seconds. It trains through AgentJet's job
methods (`set_data(type=..., dataset_path=...)`, `dump_job_as_yaml`, `load_job_from_yaml`, `tune`) and through
`sparring train --conf`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

import numpy as np
import openai
import pytest
from pydantic import Field
from typer.testing import CliRunner

from sparring import AjetTuner, ConfigError, Job, ServiceClient, TunerHandle, Workflow, WorkflowOutput, WorkflowTask
from sparring.cli import app
from sparring.logging import read_metrics, read_rollouts
from sparring.rollout import PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes

ROLES = ["werewolf"] * 3 + ["villager"] * 3 + ["seer", "witch", "hunter"]


class BadGuyException(Exception):
    """The game cannot continue (AgentJet's werewolf example punishes the trained side for it)."""


def named_player(reply: str, candidates: list[str], fallback: str) -> str:
    """The first candidate named in a reply; small models ramble, so an unreadable reply falls back."""
    found = [name for name in candidates if re.search(rf"\b{name}\b", reply, re.IGNORECASE)]
    return found[0] if found else fallback


async def ask(client: openai.AsyncOpenAI, name: str, prompt: str) -> str:
    completion = await client.chat.completions.create(
        model=name,
        messages=[
            {"role": "system", "content": f"You are {name}, playing werewolf."},
            {"role": "user", "content": prompt},
        ],
        max_tokens=4,
    )
    return completion.choices[0].message.content or ""


async def werewolves_game(players: dict[str, openai.AsyncOpenAI], roles: list[str]) -> bool:
    """One night (the werewolves pick a victim) and one day (everyone votes); True if the good side voted out a
    werewolf."""
    names = list(players)
    wolves = [name for name, role in zip(names, roles, strict=True) if role == "werewolf"]
    good = [name for name in names if name not in wolves]
    if not wolves or not good:
        raise BadGuyException(f"no game with werewolves {wolves} and good players {good}")
    picks = await asyncio.gather(
        *(ask(players[wolf], wolf, f"Night. Name one of {', '.join(good)} to kill.") for wolf in wolves)
    )
    victim = Counter(named_player(pick, good, good[0]) for pick in picks).most_common(1)[0][0]
    alive = [name for name in names if name != victim]
    votes = await asyncio.gather(
        *(ask(players[name], name, f"{victim} died. Day: vote out one of {', '.join(alive)}.") for name in alive)
    )
    voted_out = Counter(named_player(vote, alive, alive[-1]) for vote in votes).most_common(1)[0][0]
    return voted_out not in wolves


class ExampleWerewolves(Workflow):
    trainable_targets: list[str] | None = Field(default=["werewolf"], description="List of agents to be fine-tuned.")

    async def execute(self, workflow_task: WorkflowTask, tuner: AjetTuner) -> WorkflowOutput:
        assert self.trainable_targets is not None, "trainable_targets cannot be None in ExampleWerewolves."
        if "werewolf" in self.trainable_targets:
            assert len(self.trainable_targets) == 1, "Cannot train hostile roles simultaneously."

        roles = list(ROLES)
        task_id = workflow_task.task.metadata["random_number"]
        np.random.seed(int(task_id))
        np.random.shuffle(roles)

        players = {}
        for i, role in enumerate(roles):
            name = f"Player{i + 1}"
            if role == "seer" or (role == "werewolf" and "werewolf" not in [roles[j] for j in range(i)]):
                # The seer and the first werewolf speak plain HTTP to a loopback endpoint, as an external client would.
                endpoint = tuner.as_oai_baseurl_apikey(agent_name=name, target_tag=role, debug_model="participant")
                players[name] = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            else:
                players[name] = tuner.as_raw_openai_sdk_client(
                    agent_name=name, target_tag=role, debug_model="participant"
                )

        try:
            good_guy_win = await werewolves_game(players, roles)
            raw_reward, is_success = 0, False
            if (good_guy_win and self.trainable_targets[0] != "werewolf") or (
                not good_guy_win and self.trainable_targets[0] == "werewolf"
            ):
                raw_reward, is_success = 1, True
        except BadGuyException:
            raw_reward, is_success = -0.1, False
        return WorkflowOutput(reward=raw_reward, is_success=is_success)


def werewolf_job(tmp_path, tiny_model_dir) -> Job:
    tasks = tmp_path / "werewolves.jsonl"
    tasks.write_text(
        "".join(json.dumps(row) + "\n" for row in ({"random_number": 3}, {"metadata": {"random_number": 11}}))
    )
    small = {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 4}
    job = Job(
        model=small,
        auxiliary_models={"participant": small},
        algorithm={
            "algorithm_type": "grpo",
            "group_size": 2,
            "batch_size": 2,
            "learning_rate": 1e-3,
            "drop_zero_variance_groups": False,
            "allow_nothing_trained": True,
        },  # the tiny model's games may all end alike: this checks the job plumbing
        evaluation={"interval_steps": 0},
        checkpoints={"interval_steps": 0},
        run_dir=tmp_path / "run",
        logging={"console": False, "tensorboard": False},
    )
    return job.set_workflow(ExampleWerewolves).set_data(type="jsonl", dataset_path=tasks, validation_split=None)


def assert_trained_werewolves(run_dir) -> None:
    (record,) = [row for row in read_metrics(run_dir) if "reward/mean" in row]
    assert 0.0 <= record["workflow/success_rate"] <= 1.0 and "train/loss" in record
    rows = read_rollouts(run_dir / "rollouts" / "step_1.jsonl")
    trained = [row for row in rows if "agent" in row]
    assert not [row["error"] for row in trained if row["error"]]
    # Only werewolves train: 3 a game (the one on HTTP among them), each with a night call and a vote, 4 games.
    assert len(trained) == 24 and {row["role"] for row in trained} == {"werewolf"}
    assert all(len({row["agent"] for row in trained if row["episode"] == episode}) == 3 for episode in range(4))
    assert all(row["num_calls"] == 1 and row["advantage"] is not None for row in trained)
    # The good players (the seer on HTTP among them) ran on the frozen participant model: all 5 left alive voted.
    assert [len(row["frozen_turns"]) for row in rows if "frozen_turns" in row] == [5, 5, 5, 5]


def test_agentjet_werewolves_train_a_step_through_the_job_methods(tmp_path, tiny_model_dir):
    job = werewolf_job(tmp_path, tiny_model_dir)
    saved = tmp_path / "saved_experiments" / "werewolves.yaml"
    job.dump_job_as_yaml(saved)
    job.load_job_from_yaml(saved, ["train_dataset.total_steps=1"])
    assert job.workflow is ExampleWerewolves and job.config.train_dataset.total_steps == 1
    result = job.tune()
    assert result.steps == 1
    assert_trained_werewolves(tmp_path / "run")


def test_agentjets_job_arguments_are_mapped_or_noted_in_one_line(tmp_path, tiny_model_dir, caplog):
    tasks = tmp_path / "werewolves.jsonl"
    tasks.write_text("".join(json.dumps({"random_number": n}) + "\n" for n in (3, 11)))
    with caplog.at_level("WARNING", logger="sparring.trainer.job"):
        # The seed's AgentJetJob(...) call, only the import changed (`from sparring import Job as AgentJetJob`).
        job = Job(
            n_gpu=8,
            backbone="verl",
            model=str(tiny_model_dir),
            algorithm="grpo",
            num_repeat=2,
            batch_size=2,
            lr=1e-3,
            lora_rank=4,
            max_prompt_length=3000,
            max_response_length=15000,
            max_response_length_in_one_turn=4,
            max_model_len=1024,
            gpu_memory_utilization=0.85,
            experiment_dir=tmp_path / "saved_experiments",
            experiment_name="werewolves",
            logging="tensorboard",
            auxiliary_models={"participant": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 4}},
        )
    (note,) = [record.getMessage() for record in caplog.records]
    for name in (
        "n_gpu=8",
        "backbone='verl'",
        "gpu_memory_utilization=0.85",
        "max_prompt_length=3000",
        "max_response_length=15000",
    ):
        assert name in note, note
    config = job.config
    assert (
        config.algorithm.group_size,
        config.algorithm.batch_size,
        config.algorithm.learning_rate,
        config.algorithm.algorithm_type,
    ) == (2, 2, 1e-3, "grpo")
    assert (config.model.lora_rank, config.model.max_tokens, config.model.max_model_len) == (
        4,
        4,
        1024,
    ) and config.logging.tensorboard
    assert config.run_dir == str(tmp_path / "saved_experiments" / "werewolves")
    job.set_workflow(ExampleWerewolves).set_data(type="jsonl", dataset_path=tasks, validation_split=None)
    job.dump_job_as_yaml(tmp_path / "job.yaml").load_job_from_yaml(
        tmp_path / "job.yaml", ["train_dataset.total_steps=1", "algorithm.allow_nothing_trained=true"]
    )
    assert job.tune().steps == 1
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['n_gpus'\]"):
        Job(n_gpus=8)
    with pytest.raises(ConfigError, match="lr=0.0002 contradicts algorithm.learning_rate=0.001"):
        Job(algorithm={"learning_rate": 1e-3}, lr=2e-4)


def test_sparring_train_conf_runs_the_dumped_job(tmp_path, tiny_model_dir):
    saved = tmp_path / "werewolves.yaml"
    werewolf_job(tmp_path, tiny_model_dir).dump_job_as_yaml(saved)
    result = CliRunner().invoke(app, ["train", "--conf", str(saved), "--set", "train_dataset.total_steps=1"])
    assert result.exit_code == 0, result.output
    assert_trained_werewolves(tmp_path / "run")
    twice = CliRunner().invoke(app, ["train", str(saved), "--conf", str(saved)])
    assert twice.exit_code == 2 and "not both" in twice.output


# --- the pieces, one by one ------------------------------------------------------------------------


def test_workflow_task_reads_as_a_dict_and_as_agentjets_task():
    row = WorkflowTask({"task_id": "7", "question": "2+2?", "seed": 4})
    assert row["seed"] == 4 and isinstance(row, dict) and row.task_id == "7"
    assert (
        row.task.metadata is row
        and row.task.main_query == "2+2?"
        and row.task.task_id == "7"
        and row.task.init_messages == []
    )
    nested = WorkflowTask(
        {"main_query": "go", "metadata": {"random_number": 5}, "init_messages": [{"role": "user", "content": "hi"}]}
    )
    assert (
        nested.task.metadata == {"random_number": 5}
        and nested.task.main_query == "go"
        and len(nested.task.init_messages) == 1
    )


def test_pydantic_fields_on_a_workflow_are_their_defaults():
    class Villagers(Workflow):
        trainable_targets: list[str] | None = Field(default=["villager", "seer"], description="the good side")
        rounds: int = Field(default_factory=lambda: 3)

    assert Villagers.trainable_targets == ["villager", "seer"] and Villagers().rounds == 3

    class Nothing(Workflow):
        trainable_targets: list[str] | None = Field(default=[], description="nothing trains")

    with pytest.raises(TypeError, match=r"trainable_targets is \[\]"):
        as_episode_fn(Nothing)


class SaysSuccess(Workflow):
    def __init__(self, is_success):
        self.is_success = is_success

    async def execute(self, workflow_task, tuner):
        await tuner.as_raw_openai_sdk_client().chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        return WorkflowOutput(reward=1.0, is_success=self.is_success)


@pytest.fixture(scope="module")
def policy(tiny_model_dir, tmp_path_factory):
    client = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt")).create_lora_training_client(
        str(tiny_model_dir), rank=2, seed=0
    )
    return PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 2})


@pytest.mark.parametrize(
    "is_success, metrics, error_kind",
    [
        (True, {"success_rate": 1.0}, None),
        (False, {"success_rate": 0.0}, None),
        (None, {}, None),
        ("yes", {}, "bad_metric"),
    ],
)
def test_is_success_becomes_a_success_rate_metric(policy, is_success, metrics, error_kind):
    make_tuner = lambda: TunerHandle(policies={"policy": policy})  # noqa: E731
    (episode,) = asyncio.run(
        run_episodes(
            as_episode_fn(SaysSuccess(is_success)),
            [{"task_id": "0"}],
            make_tuner,
            RunnerSettings(group_size=1, episode_timeout_s=60),
        )
    )
    assert episode.error_kind == error_kind and (
        episode.metrics == metrics if error_kind is None else "is_success" in episode.error
    )
    if error_kind is None:
        assert [t.agent for t in episode.timelines] == ["default_agent_name"]


def test_set_data_takes_agentjets_arguments(tmp_path):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    job = Job().set_data(type="hf", dataset_path=folder)
    assert (job.config.train_dataset.path, job.config.train_dataset.split) == (str(folder), "train")
    assert (job.config.eval_dataset.path, job.config.eval_dataset.split) == (str(folder), "test")
    job.set_data(type="huggingface", dataset_path=folder, training_split="training", validation_split=None)
    assert job.config.train_dataset.split == "training" and job.config.eval_dataset is None
    job.set_data(type="jsonl", dataset_path=tmp_path / "tasks.jsonl")
    assert job.config.train_dataset.path == str(tmp_path / "tasks.jsonl") and job.config.eval_dataset is None
    with pytest.raises(ConfigError, match="type 'env_service' is not one sparring reads"):
        job.set_data(type="env_service", dataset_path=folder)
    with pytest.raises(ConfigError, match="not both"):
        job.set_data(folder, type="hf", dataset_path=folder)


def test_agentjets_workflow_path_spelling_imports():
    job = Job().set_workflow("test_agentjet->ExampleWerewolves")
    assert job.workflow is ExampleWerewolves and job.config.workflow == "test_agentjet->ExampleWerewolves"
