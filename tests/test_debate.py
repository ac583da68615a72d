"""Debate: verdict parsing, the judge's speaking order, rewards per side, and the acceptance test of the
several-trainable-models case: two adapters on one base model train at once and the saved adapters differ."""

import asyncio
import json
from dataclasses import dataclass, field

import pytest
from safetensors.torch import load_file

from sparring import (
    AlgorithmConfig,
    ChatModel,
    ChatResponse,
    CheckpointsConfig,
    DatasetConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerHandle,
    TunerModelConfig,
    tune,
)
from sparring.envs import load_game_config
from sparring.envs.debate import Debate
from sparring.envs.debate.rules import judge_debate, parse_verdict, speaking_order
from sparring.logging import read_metrics
from sparring.rollout import FrozenChatModel
from sparring.trainer import import_object, load_train_and_eval_tasks

TOPICS = [{"topic": f"Motion number {i} is a good idea."} for i in range(4)]
QUIET = LoggingConfig(console=False, tensorboard=False)


@dataclass(eq=False)
class Scripted(ChatModel):
    """Replies with `reply(messages)` (a text, or a text and its token logprobs); records every prompt it was shown."""

    reply: object = None
    seen: list[list[dict]] = field(default_factory=list)
    agent: str = "scripted"
    role: str | None = None

    async def __call__(self, messages, tools=None, **sampling):
        self.seen.append([dict(m) for m in messages])
        reply = self.reply(messages)
        text, logprobs = reply if isinstance(reply, tuple) else (reply, [])
        return ChatResponse(message={"role": "assistant", "content": text}, logprobs=logprobs)


def says(text):
    return Scripted(lambda messages: text)


def prefers_longer(messages):
    """A judge that picks the speaker whose speech is longer."""
    blocks = messages[-1]["content"].split("\n\n")
    first, second = [block.split(":\n", 1)[1] for block in blocks if block.startswith("Speaker")]
    return "Speaker 1" if len(first) > len(second) else "I pick 2."


@pytest.mark.parametrize(
    "text, expected", [("1", 1), ("Speaker 2 wins.", 2), ("2, then 1", 2), ("neither", None), ("", None)]
)
def test_parse_verdict(text, expected):
    assert parse_verdict(text) == expected


def test_speaking_order_depends_on_the_arguments_not_the_side():
    orders = {speaking_order({"pro": [f"argument {i}"], "con": ["counter"]}) for i in range(20)}
    assert orders == {("pro", "con"), ("con", "pro")}
    assert speaking_order({"pro": ["a"], "con": ["b"]}) == speaking_order({"pro": ["a"], "con": ["b"]})


def test_judge_in_both_orders_cancels_a_position_bias():
    arguments = {"pro": ["short"], "con": ["a much longer argument than that"]}
    assert asyncio.run(judge_debate(Scripted(prefers_longer), "t", arguments, orders=2)) == ("con", 0.0)
    assert asyncio.run(judge_debate(says("1"), "t", arguments, orders=2)) == (
        None,
        0.0,
    )  # pure position bias, no logprobs: a tie
    assert asyncio.run(judge_debate(says("hmm"), "t", arguments, orders=1)) == (None, 1.0)

    def always_one(messages):
        """Always votes for Speaker 1, but is surer of it when Speaker 1's speech is the longer one."""
        blocks = messages[-1]["content"].split("\n\n")
        first, second = [block.split(":\n", 1)[1] for block in blocks if block.startswith("Speaker")]
        return "1", [-0.1 if len(first) > len(second) else -0.9]

    judge = Scripted(always_one)
    assert asyncio.run(judge_debate(judge, "t", arguments, orders=2)) == ("con", 0.0)
    assert len(judge.seen) == 2 and judge.seen[0][2] == {
        "role": "assistant",
        "content": "1",
    }  # after the worked example
    assert {m[-1]["content"].index("short") < m[-1]["content"].index("much longer") for m in judge.seen} == {
        True,
        False,
    }
    assert (
        asyncio.run(
            judge_debate(Scripted(always_one), "t", {"pro": ["a much longer argument"], "con": ["short"]}, orders=2)
        )[0]
        == "pro"
    )


def handle(pro, con, judge, single_policy=False):
    policies = {"policy": pro} if single_policy else {"pro": pro, "con": con}
    return TunerHandle(policies=policies, auxiliary_models={"judge": judge} if judge else {})


def run_debate(task, tuner):
    return asyncio.run(Debate().execute(task, tuner))


def test_rounds_rewards_and_metrics():
    pro, con, judge = says("Yes, because it helps everyone a lot."), says("No."), Scripted(prefers_longer)
    out = run_debate({"topic": "Tea is better than coffee.", "workflow_args": {"rounds": 3}}, handle(pro, con, judge))
    assert out.reward == {"pro": 1.0, "con": -0.5} and out.response["winner"] == "pro"
    assert (
        out.metrics["agent/pro/win_rate"] == 1.0
        and out.metrics["tie_rate"] == 0.0
        and out.metrics["judge_unparsable_rate"] == 0.0
    )
    assert [len(m) for m in pro.seen] == [2, 4, 6] and [len(m) for m in con.seen] == [2, 4, 6]  # one conversation each
    assert 'Your opponent said: "No."' in pro.seen[1][-1]["content"] and "against" in con.seen[0][0]["content"]
    assert len(judge.seen) == 2 and "Tea is better than coffee." in judge.seen[0][-1]["content"]
    out = run_debate(
        {"topic": "t", "workflow_args": {"loss_reward": -1.0}},
        handle(says("short"), says("a longer reply"), Scripted(prefers_longer)),
    )
    assert out.reward == {"pro": -1.0, "con": 1.0}
    out = run_debate({"topic": "t"}, handle(pro, con, says("I cannot decide")))
    assert (
        out.reward == {"pro": 0.0, "con": 0.0}
        and out.metrics["tie_rate"] == 1.0
        and out.metrics["judge_unparsable_rate"] == 1.0
    )


def test_one_policy_argues_both_sides_and_a_missing_judge_is_named():
    policy = says("My point.")
    run_debate({"topic": "t"}, handle(policy, None, says("1"), single_policy=True))
    assert len(policy.seen) == 4 and {m[0]["content"].split()[5] for m in policy.seen} == {"for", "against"}
    with pytest.raises(ValueError, match="needs a frozen judge"):
        run_debate({"topic": "t"}, handle(policy, policy, None))
    with pytest.raises(ValueError, match="judge_orders"):
        run_debate({"topic": "t", "workflow_args": {"judge_orders": 3}}, handle(policy, policy, says("1")))


class LengthJudgedDebate(Debate):
    """The debate with a scripted judge (the longer speech wins), so the tiny model's sides get a real signal."""

    async def execute(self, task, tuner):
        tuner.auxiliary_models = {**tuner.auxiliary_models, "judge": Scripted(prefers_longer)}
        return await super().execute(task, tuner)


def debater(tiny_model_dir):
    return TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4)


def test_two_adapters_train_at_once_and_the_saved_adapters_differ(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=LengthJudgedDebate,
        train_dataset=DatasetConfig(tasks=TOPICS, total_steps=2, workflow_args={"rounds": 1}),
        models={"pro": debater(tiny_model_dir), "con": debater(tiny_model_dir)},
        algorithm=AlgorithmConfig(group_size=4, batch_size=2, learning_rate=1e-2),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 2 and set(result.sampler_paths) == {"pro", "con"}
    metrics = read_metrics(tmp_path / "run")
    assert all("agent/pro/reward" in m and "agent/con/reward" in m for m in metrics)
    assert any("train/pro/loss" in m and "train/con/loss" in m for m in metrics)  # both adapters stepped together
    adapters = {side: load_file(f"{path}/adapter_model.safetensors") for side, path in result.sampler_paths.items()}
    lora_b = [key for key in adapters["pro"] if "lora_B" in key]
    for side in ("pro", "con"):
        assert any(adapters[side][key].abs().sum() > 0 for key in lora_b), (
            f"{side} did not train (lora_B is still zero)"
        )
    assert any(not adapters["pro"][key].allclose(adapters["con"][key]) for key in lora_b)
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert set(state["models"]) == {"pro", "con"} and state["models"]["pro"] != state["models"]["con"]
    # Both adapters and optimizers come back from the checkpoint: the run goes on.
    config_file = tmp_path / "run" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("total_steps: 2", "total_steps: 3"))
    resumed = Job.load_yaml(config_file).tune(resume=str(tmp_path / "run"))
    assert resumed.steps == 3 and [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2, 3]


def test_the_debate_runs_with_a_model_as_judge(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=Debate,
        train_dataset=DatasetConfig(tasks=TOPICS[:2], total_steps=1, workflow_args={"rounds": 1}),
        models={"pro": debater(tiny_model_dir), "con": debater(tiny_model_dir)},
        auxiliary_models={"judge": TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, temperature=0.0)},
        # A tiny random judge often names nobody: every debate a tie, nothing to train on, which is not this test's
        # subject.
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, allow_nothing_trained=True),
        runner=RunnerConfig(episode_timeout_s=60),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    (metrics,) = read_metrics(tmp_path / "run")
    assert result.steps == 1 and metrics["episode/error_rate"] == 0.0
    assert {
        "workflow/judge_unparsable_rate",
        "workflow/tie_rate",
        "agent/pro/win_rate",
        "workflow/argument_words",
    } <= set(metrics)


def test_the_example_config_loads():
    config = load_game_config("debate")
    assert import_object(config.workflow) is Debate and set(config.trainable_models()) == {"pro", "con"}
    train, held_out = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    assert len(train) == 40 and len(held_out) == 200 and all(task["topic"] for task in train + held_out)
    held_out_topics = {task["topic"] for task in held_out}
    assert len(held_out_topics) == 200 and not held_out_topics & {task["topic"] for task in train}


@pytest.mark.smollm
def test_smollm2_as_judge_always_names_a_speaker(smollm_loaded, tmp_path):
    sampler = ServiceClient(base_dir=tmp_path).create_sampling_client(base_model="smollm2-135m-instruct")
    judge = FrozenChatModel(sampler, defaults={"max_tokens": 2, "temperature": 0.0}, agent="judge")
    debates = [
        ("Zoos should be closed.", "Animals suffer in small cages.", "Zoos protect endangered species."),
        ("Homework should be banned.", "Children need time to play.", "Homework builds discipline."),
        ("Public transport should be free.", "Free buses cut traffic.", "Someone must pay for it."),
    ]
    for topic, pro, con in debates:
        winner, unparsable = asyncio.run(judge_debate(judge, topic, {"pro": [pro], "con": [con]}, orders=2))
        assert unparsable == 0.0 and winner in ("pro", "con")
