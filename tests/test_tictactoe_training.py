"""Tic-tac-toe training: 2 steps on the tiny model against each kind of opponent, the example configs, and the
real SmolLM2 naming cells."""

import asyncio
import random
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

import sparring.envs.tictactoe
from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    tune,
)
from sparring.envs import load_game_config
from sparring.envs.common import play_game
from sparring.envs.tictactoe import (
    TicTacToe,
    fallible_minimax,
    make_tasks,
    random_legal,
    tictactoe,
)
from sparring.envs.tictactoe.rules import (
    random_move,
)
from sparring.logging import read_metrics, read_rollouts
from sparring.rollout import FrozenChatModel
from sparring.trainer import import_object, load_tasks, load_train_and_eval_tasks


@pytest.mark.parametrize("opponent", ["self", "random", "snapshot"])
def test_two_training_steps_on_the_tiny_model(tiny_model_dir, tmp_path, opponent):
    result = tune(
        workflow_func=tictactoe,
        train_dataset=DatasetConfig(
            tasks=make_tasks("train", 8, seed=1), total_steps=2, workflow_args={"opponent": opponent}
        ),
        eval_dataset=DatasetConfig(tasks=make_tasks("eval", 2, seed=2), workflow_args={"opponent": "minimax"}),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=4, lora_rank=4),
        auxiliary_models={"snapshot": TunerModelConfig(snapshot_of="policy", snapshot_interval_steps=1)},
        # The tiny model's moves are often all invalid (every reward -1): this checks the plumbing, not learning.
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=1e-3, allow_nothing_trained=True),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=2),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 2
    metrics = read_metrics(tmp_path / "run")
    train = [m for m in metrics if "reward/mean" in m]
    assert {
        "role/player/win_rate",
        "role/player/reward",
        "workflow/invalid_action_rate",
        f"vs_{opponent}/win_rate",
    } <= set(train[0])
    assert [m["snapshot/snapshot/age_steps"] for m in train] == [0, 0]  # retaken every step
    assert result.evaluations and "eval/vs_minimax/win_rate" in result.evaluations[-1]
    agents = {row["agent"] for row in read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl") if "agent" in row}
    assert agents <= {"x", "o"} and agents
    windows = load_benchmark("tictactoe_tactics").tactics_in_rollouts(tmp_path / "run", window=1)
    policy_moves = [
        sum("completions" in row for row in read_rollouts(tmp_path / "run" / "rollouts" / f"step_{step}.jsonl"))
        for step in (1, 2)
    ]
    assert [(w.first_step, w.moves) for w in windows] == [
        (1, policy_moves[0]),
        (2, policy_moves[1]),
    ]  # every move's board read back
    assert all(w.perfect <= w.tactical <= w.moves and w.uniform <= w.tactical for w in windows)


def test_the_example_configs_load():
    config = load_game_config("tictactoe")
    assert import_object(config.workflow) is tictactoe and not config.auxiliary_models
    league = config.league
    assert (league.sampling, league.draw_per, league.pfsp_power, league.snapshot_every_steps) == (
        "pfsp",
        "group",
        0.5,
        0,
    )
    assert config.algorithm.turn_reward_discount == 0.0 and config.train_dataset.workflow_args["value_credit"] == 1.0
    assert {name: import_object(path) for name, path in league.scripted.items()} == {
        "random_legal": random_legal,
        "fallible_minimax": fallible_minimax,
    }
    train, held_out = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    assert len(train) == 256 and len(held_out) == 200 and held_out[0]["workflow_args"]["opponent"] == "random"
    assert [{key: task[key] for key in ("task_id", "seed", "side")} for task in train] == make_tasks(
        "train", 256, seed=1
    )
    games = [{key: task[key] for key in ("task_id", "seed", "side")} for task in held_out]
    assert games == make_tasks("eval", 200, seed=2) and games[:100] == make_tasks(
        "eval", 100, seed=2
    )  # the first 100: earlier results' games
    earlier_league = load_tasks(
        DatasetConfig(path=str(Path(sparring.envs.tictactoe.__file__).parent / "data" / "league.jsonl"))
    )
    assert [task["workflow_args"]["opponent"] for task in earlier_league[:6]] == ["snapshot", "random", "minimax"] * 2
    train_seeds = {task["seed"] for task in train} | {task["seed"] for task in earlier_league}
    assert len({task["seed"] for task in held_out}) == 200 and not train_seeds & {task["seed"] for task in held_out}


@pytest.mark.smollm
def test_smollm2_answers_the_board_with_a_cell_number(smollm_loaded, tmp_path):
    """The prompt design holds on the real model: most replies name a cell, many of them a free one."""
    sampler = ServiceClient(base_dir=tmp_path).create_sampling_client(base_model="smollm2-135m-instruct")
    rng = random.Random(0)

    async def games():  # concurrently, so the model's turns are sampled in batches
        plays = []
        for game in range(12):
            policy = FrozenChatModel(sampler, defaults={"max_tokens": 3, "seed": game}, agent="x")
            seats = ("x", "o") if game % 2 == 0 else ("o", "x")
            plays.append(play_game(TicTacToe(), {seats[0]: policy, seats[1]: lambda g: random_move(g.board, rng)}))
        return await asyncio.gather(*plays)

    mine = [turn for record in asyncio.run(games()) for turn in record.turns if turn.reply is not None]
    replies = [turn.reply for turn in mine]
    legal = sum(turn.move is not None for turn in mine)
    names_a_cell = sum(any(ch in "123456789" for ch in reply) for reply in replies) / len(replies)
    assert names_a_cell >= 0.7, replies
    assert legal / len(replies) >= 0.3, replies
