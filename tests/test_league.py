"""The opponent league: PFSP weighting and draws from fixed records, eviction, the entropy-bonus loss term (alone
and in the learner), the training temperature floor, per-episode or per-group draws through the workflow API, the
league's config checks, and a 3-step tic-tac-toe league on the tiny model (snapshots added and evicted, 'latest'
drawing only the newest, per-opponent rates and collapse metrics logged, the pool resumed from a checkpoint)."""

import asyncio
import json
import random
from collections import Counter

import pytest
import torch

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    WorkflowOutput,
    tune,
    types,
)
from sparring.algorithms import OpponentRecord, draw_opponents, draw_probabilities, eviction_choice, pfsp_weight
from sparring.engine.losses import LOSSES, check_loss_config, elementwise_loss, get_loss
from sparring.envs.tictactoe import make_tasks, random_legal, tictactoe
from sparring.integrations import TunerHandle
from sparring.logging import read_metrics, render_report
from sparring.rollout import PolicyChatModel, RunnerSettings, ScriptedChatModel, as_episode_fn, run_episodes
from sparring.trainer import ConfigError, TuneConfig
from sparring.trainer.config_file import check_names
from sparring.trainer.models import LEAGUE_TASK_KEY, League
from sparring.trainer.sections import LeagueConfig

RECORDS = {
    "random_legal": OpponentRecord(wins=8, draws=0, losses=0),  # failure (0 + 1) / (8 + 2) = 0.1
    "minimax": OpponentRecord(wins=0, draws=2, losses=6),  # (8 + 1) / (8 + 2) = 0.9
    "snapshot-3": OpponentRecord(wins=3, draws=1, losses=2),  # (3 + 1) / (6 + 2) = 0.5
    "snapshot-5": OpponentRecord(),  # never played: 1 / 2
}


def test_pfsp_weights_follow_the_recorded_failure_rates():
    assert [RECORDS[name].failure_rate for name in RECORDS] == pytest.approx([0.1, 0.9, 0.5, 0.5])
    probabilities = draw_probabilities(RECORDS, "pfsp", power=2.0)
    total = 0.1**2 + 0.9**2 + 0.5**2 + 0.5**2
    assert probabilities == pytest.approx(
        {"random_legal": 0.01 / total, "minimax": 0.81 / total, "snapshot-3": 0.25 / total, "snapshot-5": 0.25 / total}
    )
    assert pfsp_weight(0.9, 1.0) == 0.9 and draw_probabilities(RECORDS, "pfsp", power=0.0) == pytest.approx(
        dict.fromkeys(RECORDS, 0.25)
    )

    drawn = draw_opponents(probabilities, 20_000, random.Random(7))
    shares = {name: count / len(drawn) for name, count in Counter(drawn).items()}
    assert shares == pytest.approx(probabilities, abs=0.01)
    assert drawn[:50] == draw_opponents(probabilities, 20_000, random.Random(7))[:50]  # a seeded RNG repeats its draws


def test_uniform_and_latest_draws():
    assert draw_probabilities(RECORDS, "uniform") == dict.fromkeys(RECORDS, 0.25)
    latest = draw_probabilities(RECORDS, "latest", newest="snapshot-5")
    assert latest == {"random_legal": 0.0, "minimax": 0.0, "snapshot-3": 0.0, "snapshot-5": 1.0}
    assert set(draw_opponents(latest, 100, random.Random(0))) == {"snapshot-5"}
    with pytest.raises(ValueError, match="newest snapshot"):
        draw_probabilities({"minimax": OpponentRecord()}, "latest", newest=None)


def test_eviction_drops_the_oldest_or_the_weakest_never_the_newest():
    snapshots = ["snapshot-0", "snapshot-5", "snapshot-10"]
    records = {
        "snapshot-0": OpponentRecord(wins=1, losses=5),
        "snapshot-5": OpponentRecord(wins=9),
        "snapshot-10": OpponentRecord(wins=50),
    }
    assert eviction_choice(snapshots, records, "oldest") == "snapshot-0"
    assert (
        eviction_choice(snapshots, records, "weakest") == "snapshot-5"
    )  # beaten most; snapshot-10 is newer still but stays
    assert eviction_choice(snapshots, {}, "weakest") == "snapshot-0"  # ties go to the oldest


def test_records_decay_so_recent_games_weigh_most():
    record = OpponentRecord(wins=10)
    record.decay(0.5)
    record.add("loss")
    assert (record.wins, record.losses, record.games) == (5.0, 1.0, 6.0)
    with pytest.raises(ValueError, match="outcome"):
        record.add("victory")


def test_the_entropy_bonus_raises_entropy_exactly_in_expectation():
    """Averaged over the sampled tokens with their probabilities (q = p), the term's gradient is -coef * grad H."""
    logits_V = torch.tensor([2.0, 0.5, -1.0], requires_grad=True)
    logprobs_V = logits_V.log_softmax(-1)
    inputs = {"logprobs": logprobs_V.detach(), "advantages": torch.ones(3)}
    bonus_V = LOSSES["entropy_bonus"].fn(logprobs_V, inputs, {"entropy_coef": 0.1})
    assert bonus_V.detach().tolist() == pytest.approx((0.1 * logprobs_V.detach()).tolist())  # value: -coef * (-log p)
    (logprobs_V.exp().detach() * bonus_V).sum().backward()
    bonus_grad = logits_V.grad.clone()
    logits_V.grad = None
    entropy = -(logits_V.softmax(-1) * logits_V.log_softmax(-1)).sum()
    (-0.1 * entropy).backward()
    assert bonus_grad.tolist() == pytest.approx(logits_V.grad.tolist(), abs=1e-7)
    assert bonus_grad[0] > 0 > bonus_grad[2]  # a descent step lowers the likeliest token's logit, raises the rarest's


def test_the_entropy_bonus_is_a_term_off_by_default_and_only_on_trained_tokens():
    logprobs = torch.tensor([-0.1, -2.0, -3.0], requires_grad=True)
    inputs = {
        "logprobs": logprobs.detach(),
        "advantages": torch.tensor([0.5, 0.0, -1.0]),
        "target_tokens": torch.tensor([1, 2, 3]),
    }
    plain = elementwise_loss("ppo", logprobs, inputs, {})
    with_bonus = elementwise_loss("ppo", logprobs, inputs, {"entropy_coef": 0.2})
    assert (with_bonus - plain).detach().tolist() == pytest.approx(
        [0.2 * -0.1, 0.0, 0.2 * -3.0]
    )  # none where advantage is 0
    assert check_loss_config("ppo", {"entropy_coef": 0.01, "clip_low_threshold": 0.9}) == {
        "entropy_coef": 0.01,
        "clip_low_threshold": 0.9,
    }
    with pytest.raises(ValueError, match="entropy_coef"):
        check_loss_config("cross_entropy", {"entropy_coef": 0.01})  # no advantages to gate it
    with pytest.raises(ValueError, match="a term added to a loss"):
        get_loss("entropy_bonus")
    with pytest.raises(ConfigError, match="loss_fn 'entropy_bonus'"):
        check_names(TuneConfig(algorithm=AlgorithmConfig(loss_fn="entropy_bonus")))


def test_the_learner_adds_the_entropy_bonus_when_its_coefficient_is_set(tiny_model_dir, tmp_path):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    tokens = client.get_renderer().render([{"role": "user", "content": "hello there"}])
    advantages = [0.0] * (len(tokens) - 4) + [1.0, -0.5, 0.0]
    sampler_logprobs = [-1.0] * (len(tokens) - 1)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": sampler_logprobs, "advantages": advantages},
    )
    plain, bonus = (client.forward([datum], "ppo", config).result() for config in ({}, {"entropy_coef": 0.5}))
    learner_N = plain.loss_fn_outputs[0]["logprobs"].to_torch().double()
    advantages_N, sampler_N = (
        torch.tensor(advantages, dtype=torch.float64),
        torch.tensor(sampler_logprobs, dtype=torch.float64),
    )
    expected = (0.5 * (advantages_N != 0) * (learner_N - sampler_N).exp() * learner_N).sum().item()
    assert bonus.metrics["loss:sum"] - plain.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4) and expected < 0


def test_training_rollouts_sample_at_the_temperature_floor_or_above():
    greedy = PolicyChatModel(sampler=None, defaults={"temperature": 0.0}, temperature_floor=0.7)
    assert greedy._params({}).temperature == 0.7 and greedy._params({"temperature": 0.2}).temperature == 0.7
    assert greedy._params({"temperature": 1.3}).temperature == 1.3
    assert PolicyChatModel(sampler=None, defaults={"temperature": 0.0})._params({}).temperature == 0.0


@pytest.mark.parametrize(
    ("league", "message"),
    [
        ({"snapshot_evry_steps": 1}, "league.snapshot_evry_steps"),
        ({"models": ["base"]}, "league.models: 'base' is not in auxiliary_models"),
        ({"snapshot_every_steps": 0, "sampling": "latest", "models": []}, "league"),
        ({"scripted": {"bot": "sparring.envs.tictactoe:no_such_bot"}}, "league.scripted.bot"),
        ({"sampling": "best"}, "league.sampling"),
        ({"max_snapshots": 0}, "league.max_snapshots"),
        ({"scripted": {"snapshot-1": "sparring.envs.tictactoe:minimax"}}, "names the snapshots"),
    ],
)
def test_a_bad_league_is_a_config_error_naming_the_field(league, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        check_names(TuneConfig.from_dict({"league": league}))


def test_a_league_needs_the_local_runner_and_works_at_any_staleness():
    TuneConfig.from_dict({"league": {}, "algorithm": {"max_staleness": 1}})  # see test_async_training.py
    with pytest.raises(ConfigError, match="league.learner"):
        TuneConfig.from_dict({"league": {}, "models": {"a": {}, "b": {}}})


async def name_the_opponent(task, model, auxiliary_models):
    """Plays nothing: reports the drawn opponent (by the name it got, and its chat model) as a metric-free draw."""
    name = task["workflow_args"]["opponent"]
    reply = await auxiliary_models[name]([{"role": "user", "content": "1|2|3\n4|5|6\n7|8|9"}])
    return WorkflowOutput(reward=0.0, response=(name, reply.content), outcome="draw")


def _opponents_met(scripted: dict[str, str], tasks: list[dict], draw_per: str) -> list[set[str]]:
    """One league step (8 episodes per task, opponents drawn per `draw_per`): the opponents each task's group met."""
    league = League(
        LeagueConfig(snapshot_every_steps=0, scripted=scripted, sampling="uniform", draw_per=draw_per),
        client=None,
        sampling_defaults={},
    )
    league.begin_step(0, tasks, group_size=8)
    seen = []

    async def workflow(task, model, auxiliary_models):
        output = await name_the_opponent(task, model, auxiliary_models)
        seen.append((task["task_id"], output.response[0]))
        assert output.response[1] in {str(cell) for cell in range(1, 10)}  # the scripted opponent answered
        return output

    episodes = asyncio.run(
        run_episodes(
            league.episode_fn(as_episode_fn(workflow)),
            tasks,
            lambda: TunerHandle(policies={"policy": ScriptedChatModel.seeded(random_legal)}),
            RunnerSettings(group_size=8),
        )
    )
    assert not any(episode.failed for episode in episodes)
    metrics = league.end_step()
    assert sum(metrics[f"league/{name}/games"] for name in scripted if f"league/{name}/games" in metrics) == 48
    assert all(metrics[f"league/{name}/draw_rate"] == 1.0 for name in scripted if f"league/{name}/games" in metrics)
    return [{name for task_id, name in seen if task_id == task["task_id"]} for task in tasks]


def test_a_group_meets_one_opponent_or_one_each_as_configured():
    scripted = {name: "sparring.envs.tictactoe:random_legal" for name in ("a", "b", "c", "d")}
    tasks = [{"task_id": str(i)} for i in range(6)]
    opponents = {draw_per: _opponents_met(scripted, tasks, draw_per) for draw_per in ("episode", "group")}
    assert all(len(names) == 1 for names in opponents["group"]) and len(set().union(*opponents["group"])) > 1
    assert all(len(names) > 1 for names in opponents["episode"])


async def reward_by_opponent(task, model, auxiliary_models):
    opponent = task["workflow_args"]["opponent"]
    return WorkflowOutput(reward=1.0 if opponent == "a" else 0.0, outcome="draw")


@pytest.mark.parametrize("per_opponent", [True, False])
def test_with_baseline_per_opponent_a_game_is_baselined_among_games_against_its_opponent(per_opponent):
    scripted = {"a": "sparring.envs.tictactoe:random_legal", "b": "sparring.envs.tictactoe:random_legal"}
    league = League(
        LeagueConfig(snapshot_every_steps=0, scripted=scripted, sampling="uniform", baseline_per_opponent=per_opponent),
        client=None,
        sampling_defaults={},
    )
    tasks = [{"task_id": "t"}]
    league.begin_step(0, tasks, group_size=8)
    episodes = asyncio.run(
        run_episodes(
            league.episode_fn(as_episode_fn(reward_by_opponent)),
            tasks,
            lambda: TunerHandle(policies={"policy": ScriptedChatModel.seeded(random_legal)}),
            RunnerSettings(group_size=8),
        )
    )
    assert {episode.reward for episode in episodes} == {0.0, 1.0}  # both opponents were met
    if per_opponent:
        assert all(episode.baseline_group == ("a" if episode.reward == 1.0 else "b") for episode in episodes)
    else:
        assert all(episode.baseline_group is None for episode in episodes)


async def no_outcome(task, model, auxiliary_models):
    return WorkflowOutput(reward=0.0)


def test_a_league_game_without_an_outcome_is_an_error_episode():
    league = League(
        LeagueConfig(snapshot_every_steps=0, scripted={"bot": "sparring.envs.tictactoe:random_legal"}),
        client=None,
        sampling_defaults={},
    )
    tasks = [{"task_id": "t"}]
    league.begin_step(0, tasks, group_size=2)
    episodes = asyncio.run(
        run_episodes(
            league.episode_fn(as_episode_fn(no_outcome)),
            tasks,
            lambda: TunerHandle(policies={"policy": ScriptedChatModel.seeded(random_legal)}),
            RunnerSettings(group_size=2),
        )
    )
    assert [episode.error_kind for episode in episodes] == ["bad_outcome", "bad_outcome"]
    assert league.end_step()["league/bot/draw_probability"] == 1.0


def test_a_task_marked_out_of_the_league_gets_no_opponent_and_counts_in_no_record():
    league = League(
        LeagueConfig(snapshot_every_steps=0, scripted={"bot": "sparring.envs.tictactoe:random_legal"}),
        client=None,
        sampling_defaults={},
    )
    tasks = [{"task_id": "game"}, {"task_id": "drill", LEAGUE_TASK_KEY: False}]
    league.begin_step(0, tasks, group_size=2)

    async def workflow(task, model, auxiliary_models):
        if task["task_id"] == "drill":
            assert "opponent" not in task.get("workflow_args", {}) and "bot" not in auxiliary_models
            return WorkflowOutput(reward=1.0)  # no outcome: not a league game
        return await name_the_opponent(task, model, auxiliary_models)

    episodes = asyncio.run(
        run_episodes(
            league.episode_fn(as_episode_fn(workflow)),
            tasks,
            lambda: TunerHandle(policies={"policy": ScriptedChatModel.seeded(random_legal)}),
            RunnerSettings(group_size=2),
        )
    )
    assert not any(episode.failed for episode in episodes) and len(episodes) == 4
    assert league.end_step()["league/bot/games"] == 2.0 and league.records["bot"].draws == 2


def test_three_league_steps_on_the_tiny_model(tiny_model_dir, tmp_path):
    """'latest' with a snapshot every step and room for two: each step draws only the snapshot taken at its start, and
    the oldest leaves at step 3; the scripted opponent stays in the pool, never drawn."""
    result = tune(
        workflow_func=tictactoe,
        train_dataset=DatasetConfig(
            tasks=make_tasks("train", 4, seed=1), total_steps=3, workflow_args={"memory": "turn", "move_credit": 0.5}
        ),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3, lora_rank=4),
        league=LeagueConfig(
            snapshot_every_steps=1,
            max_snapshots=2,
            scripted={"random_legal": "sparring.envs.tictactoe:random_legal"},
            sampling="latest",
        ),
        algorithm=AlgorithmConfig(
            group_size=2, batch_size=2, learning_rate=1e-3, rollout_temperature_floor=1.0, allow_nothing_trained=True
        ),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=3),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 3
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/mean" in m]
    for step, metrics in enumerate(steps):
        played = {key.split("/")[1] for key in metrics if key.startswith("league/") and key.endswith("/games")}
        assert played == {f"snapshot-{step}"} and metrics[f"league/snapshot-{step}/games"] == 4
        assert (
            metrics[f"league/snapshot-{step}/draw_probability"] == 1.0
            and metrics["league/random_legal/draw_probability"] == 0.0
        )
        rates = [metrics[f"league/snapshot-{step}/{outcome}_rate"] for outcome in ("win", "draw", "loss")]
        assert sum(rates) == pytest.approx(1.0)
        assert "collapse/entropy" in metrics and "collapse/distinct_share" in metrics
        assert metrics["workflow/invalid_action_rate"] == 0.0  # moves are constrained to the free cells
    assert [m["league/snapshots"] for m in steps] == [1, 2, 2]
    assert (
        "league/snapshot-0/draw_probability" in steps[1] and "league/snapshot-0/draw_probability" not in steps[2]
    )  # evicted
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000003" / "trainer_state.json").read_text())
    assert [s["name"] for s in state["league"]["snapshots"]] == ["snapshot-1", "snapshot-2"]
    assert set(state["league"]["records"]) == {"snapshot-1", "snapshot-2"}
    config_file = (
        tmp_path / "run" / "config.yaml"
    )  # one step more, resumed: the pool and records come back from the checkpoint
    config_file.write_text(config_file.read_text().replace("total_steps: 3", "total_steps: 4"))
    Job.load_yaml(config_file).tune(resume=str(tmp_path / "run"))
    fourth = [m for m in read_metrics(tmp_path / "run") if "reward/mean" in m][-1]
    assert (
        fourth["league/snapshots"] == 2
        and fourth["league/snapshot-3/games"] == 4
        and "league/snapshot-2/draw_probability" in fourth
    )
    page = render_report(tmp_path / "run")  # what `sparring view` shows: the last step's pool as a table
    assert (
        "League opponents" in page
        and "<th>snapshot-3</th><td>1.000</td><td>4</td>" in page
        and "<th>random_legal</th><td>0.000</td><td>0</td>" in page
    )
