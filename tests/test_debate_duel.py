"""The debate duel: one motion argued from both sides against a frozen opponent, each seat rewarded by its own
debate, the length metrics that expose a judge counting words, the scripted baseline, and a short training run."""

import asyncio
import random

import pytest
from test_debate import QUIET, TOPICS, Scripted, prefers_longer, says

from sparring import AlgorithmConfig, DatasetConfig, RunnerConfig, TunerModelConfig, tune
from sparring.envs import game_folder, load_game_config
from sparring.envs.debate.rules import speech_fault
from sparring.envs.debate_duel import debate_duel, restate
from sparring.logging import read_metrics
from sparring.trainer import import_object, load_train_and_eval_tasks


def duel(task, policy, opponent, judge):
    return asyncio.run(debate_duel(task, policy, {"opponent": opponent, "judge": judge}))


def test_the_policy_argues_both_sides_each_seat_rewarded_by_its_own_debate():
    policy, opponent = says("Yes, because it helps everyone a lot."), says("No.")
    out = duel({"topic": "Tea is better than coffee."}, policy, opponent, Scripted(prefers_longer))
    assert out.reward == {"pro": 1.0, "con": 1.0} and out.metrics["win_rate"] == 1.0 and out.metrics["tie_rate"] == 0.0
    assert sorted(m[0]["content"].split()[5] for m in policy.seen) == ["against", "for"]  # one speech a side
    assert sorted(m[0]["content"].split()[5] for m in opponent.seen) == ["against", "for"]
    assert (
        out.metrics["policy_words"] == 7
        and out.metrics["opponent_words"] == 1
        and out.metrics["longer_speech_win_rate"] == 1.0
    )
    # The opponent is longer as pro only: the policy wins its con debate and loses the pro one.
    out = duel(
        {"topic": "t", "workflow_args": {"loss_reward": -1.0}},
        says("Some words here."),
        Scripted(lambda m: "Far more words than the policy says." if " for " in m[0]["content"] else "No."),
        Scripted(prefers_longer),
    )
    assert (
        out.reward == {"pro": 1.0, "con": -1.0}
        and out.metrics["agent/pro/win_rate"] == 1.0
        and out.metrics["win_rate"] == 0.5
    )
    out = duel({"topic": "t"}, says("Same."), says("Same."), says("I cannot decide"))
    assert (
        out.reward == {"pro": 0.0, "con": 0.0}
        and out.metrics["tie_rate"] == 1.0
        and "longer_speech_win_rate" not in out.metrics
    )


@pytest.mark.parametrize(
    "speeches, fault",
    [
        (["I'm ready."], "off_topic"),  # the stock phrase SmolLM2's judge preferred (docs/results.md)
        (["I'm ready. I.D. I'm here."], "off_topic"),
        ([""], "off_topic"),
        (["Zoos waste money.", "Zoos waste money!"], "repetitive"),  # a line said twice, across speeches too
        (["zoos zoos zoos zoos animals"], "repetitive"),  # under half its words distinct
        (["Closing every zoo frees the animals."], None),  # "closing" shares "clos" with "closed"
        (["I argue against the motion: Zoos should be closed."], "restates"),  # the restate baseline argues nothing
        (['I say "zoos should be closed" is wrong.'], "restates"),
        (["Zoos should stay open and be closed only when unsafe."], None),
    ],
)
def test_speech_fault_wants_the_motions_subject_not_quoted_back_and_no_line_repeated(speeches, fault):
    assert speech_fault("Zoos should be closed.", speeches) == fault


def test_with_the_speech_check_a_side_that_fails_it_loses_without_the_judge():
    topic = {"topic": "Zoos should be closed.", "workflow_args": {"speech_check": True}}
    judge = Scripted(prefers_longer)
    out = duel(topic, says("I'm ready. I'm ready. I'm here and ready."), says("Zoos keep animals safe."), judge)
    assert (
        out.reward == {"pro": -0.5, "con": -0.5} and out.metrics["win_rate"] == 0.0 and judge.seen == []
    )  # longer, but says nothing
    assert (
        out.metrics["policy_fault_rate"] == 1.0
        and out.metrics["opponent_fault_rate"] == 0.0
        and "judged_win_rate" not in out.metrics
    )
    out = duel(topic, says("Zoos keep animals safe."), says("Yes."), judge)
    assert out.metrics["win_rate"] == 1.0 and out.metrics["opponent_fault_rate"] == 1.0 and judge.seen == []
    out = duel(topic, says("Hello."), says("Yes."), judge)
    assert out.metrics["tie_rate"] == 1.0 and judge.seen == []
    out = duel(
        topic, says("Zoos keep rare animals alive and teach children."), says("Closed zoos free animals."), judge
    )
    assert (
        out.metrics["win_rate"] == 1.0 and len(judge.seen) == 4 and out.metrics["policy_fault_rate"] == 0.0
    )  # both pass: judged
    assert out.metrics["judged_win_rate"] == 1.0
    out = duel(
        {"topic": "Zoos should be closed."},
        says("I'm ready. I'm ready. I'm here and ready."),
        says("Zoos keep animals safe."),
        judge,
    )
    assert (
        out.metrics["win_rate"] == 1.0 and "policy_fault_rate" not in out.metrics
    )  # off by default: the judge decides


def test_a_missing_opponent_or_judge_and_bad_args_are_named():
    with pytest.raises(ValueError, match="needs a frozen opponent"):
        asyncio.run(debate_duel({"topic": "t"}, says("a"), {"judge": says("1")}))
    with pytest.raises(ValueError, match="needs a frozen judge"):
        asyncio.run(debate_duel({"topic": "t"}, says("a"), {"opponent": says("b")}))
    with pytest.raises(ValueError, match="judge_orders"):
        duel({"topic": "t", "workflow_args": {"judge_orders": 3}}, says("a"), says("b"), says("1"))


def test_restate_names_its_side_and_nothing_else():
    brief = [
        {
            "role": "system",
            "content": 'You are a debater arguing against the motion: "Zoos should be closed.". Answer briefly.',
        }
    ]
    assert restate(brief, random.Random(0)) == "I argue against the motion: Zoos should be closed."
    with pytest.raises(ValueError, match="brief"):
        restate([{"role": "user", "content": "hi"}], random.Random(0))


def test_the_packaged_config_and_its_held_out_motions():
    config = load_game_config("debate_duel")
    assert import_object(config.workflow) is debate_duel and set(config.auxiliary_models) == {"opponent", "judge"}
    train, held_out = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    assert len(held_out) == 200 and not {task["topic"] for task in train} & {task["topic"] for task in held_out}
    for split in ("train", "eval"):  # the debate game's motions (its make_tasks draws from those files)
        assert (game_folder("debate_duel") / "data" / f"{split}.jsonl").read_text() == (
            game_folder("debate") / "data" / f"{split}.jsonl"
        ).read_text()


async def length_judged_duel(task, model, auxiliary_models):
    """The duel with a scripted judge (the longer speech wins), so the tiny model's seats get a real signal."""
    return await debate_duel(task, model, {**auxiliary_models, "judge": Scripted(prefers_longer)})


def test_a_duel_trains_on_the_tiny_model_with_the_seats_as_roles(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=length_judged_duel,
        train_dataset=DatasetConfig(tasks=TOPICS[:2], total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4),
        auxiliary_models={"opponent": TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8)},
        algorithm=AlgorithmConfig(group_size=4, batch_size=2, learning_rate=1e-2),
        runner=RunnerConfig(episode_timeout_s=60),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    metrics = read_metrics(tmp_path / "run")
    assert result.steps == 2 and all(m["episode/error_rate"] == 0.0 for m in metrics)
    assert all(
        {"role/pro/reward", "role/con/reward", "workflow/win_rate", "workflow/policy_words", "workflow/opponent_words"}
        <= set(m)
        for m in metrics
    )
    assert any(
        m["advantage/groups"] > m["advantage/dropped_groups"] for m in metrics
    )  # some seat's group had a winner and a loser
