"""Tic-tac-toe: rules, lenient parsing, the scripted opponents, the two-player coordinator with scripted
players (illegal input included), the workflow's rewards and metrics, the opening curriculum, 2 training steps on
the tiny model, and the supervised-ceiling benchmark's data and one step of it."""

import argparse
import asyncio
import itertools
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark
from transformers import AutoTokenizer

import sparring.envs.tictactoe
from sparring import (
    AlgorithmConfig,
    ChatModel,
    ChatResponse,
    DatasetConfig,
    LoggingConfig,
    ServiceClient,
    TunerModelConfig,
    tune,
)
from sparring.envs import load_game_config
from sparring.envs.common import play_game
from sparring.envs.tictactoe import (
    TicTacToe,
    fallible_minimax,
    make_move_examples,
    make_puzzles,
    make_tasks,
    random_legal,
    tictactoe,
)
from sparring.envs.tictactoe.rules import (
    Board,
    IllegalMove,
    best_moves,
    completing_cells,
    is_tactical,
    minimax_move,
    parse_move,
    random_move,
    score_given_away_to_chance,
    tactical_positions,
    teaching_moves,
    value_given_away,
)
from sparring.envs.tictactoe.tasks import hold_out
from sparring.envs.tictactoe.workflow import TicTacToeArgs, opening_position
from sparring.logging import read_metrics, read_rollouts
from sparring.models.renderer import get_renderer
from sparring.rollout import FrozenChatModel
from sparring.trainer import import_object, load_tasks, load_train_and_eval_tasks


@dataclass(eq=False)
class Scripted(ChatModel):
    """A chat model that replies with the next of its scripted texts and remembers what it was shown."""

    replies: list[str] = field(default_factory=list)
    seen: list[list[dict]] = field(default_factory=list)
    agent: str = "scripted"
    role: str | None = None

    async def __call__(self, messages, tools=None, **sampling):
        self.seen.append([dict(m) for m in messages])
        return ChatResponse(message={"role": "assistant", "content": self.replies[len(self.seen) - 1]})


def test_board_turns_wins_and_illegal_moves():
    board = Board()
    assert board.to_move == "X" and board.free() == list(range(1, 10))
    board = board.play(5)
    assert board.to_move == "O" and 5 not in board.free()
    with pytest.raises(IllegalMove, match="not free"):
        board.play(5)
    with pytest.raises(IllegalMove):
        board.play(10)
    for line in [(1, 2, 3), (4, 5, 6), (7, 8, 9), (1, 4, 7), (2, 5, 8), (3, 6, 9), (1, 5, 9), (3, 5, 7)]:
        others = [c for c in range(1, 10) if c not in line]
        moves = [line[0], others[0], line[1], others[1], line[2]]
        won = Board.from_moves(moves)
        assert won.winner() == "X" and won.is_over()
        with pytest.raises(IllegalMove, match="over"):
            won.play(others[2])
    draw = Board.from_moves([1, 2, 3, 5, 4, 6, 8, 7, 9])
    assert draw.winner() is None and draw.is_over()
    assert Board.from_moves([1, 5]).render() == "X|2|3\n4|O|6\n7|8|9"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("5", 5),
        ("I take 5.", 5),
        ("1 is taken, so 3", 3),
        ("cell 7!", 7),
        ("12", None),
        ("0", None),
        ("the middle", None),
        ("", None),
    ],
)
def test_parse_move_takes_the_first_free_cell_named(text, expected):
    assert parse_move(text, Board.from_moves([1, 2])) == expected


def test_minimax_takes_wins_blocks_and_never_loses():
    assert best_moves(Board.from_moves([1, 4, 2, 5])) == [3]  # X completes the top row
    assert best_moves(Board.from_moves([1, 5, 9, 2])) == [8]  # X must block O's 2-5-8 column
    rng = random.Random(0)
    for game in range(60):
        minimax_mark = "XO"[game % 2]
        board = Board()
        while not board.is_over():
            board = board.play(minimax_move(board, rng) if board.to_move == minimax_mark else random_move(board, rng))
        assert board.winner() in (None, minimax_mark)
    board = Board()
    while not board.is_over():
        board = board.play(minimax_move(board, rng))
    assert board.winner() is None  # perfect play on both sides draws


def test_coordinator_keeps_one_conversation_per_player_and_alternates():
    x, o = Scripted(["5", "1", "9"]), Scripted(["I take 3", "7"])
    record = asyncio.run(play_game(TicTacToe(), {"x": x, "o": o}))
    assert [(t.seat, t.move) for t in record.turns] == [("x", 5), ("o", 3), ("x", 1), ("o", 7), ("x", 9)]
    assert record.winner == "x" and record.forfeit is None and record.moves_by("x") == 3
    # Each player's calls extend its own conversation: system, example exchange, then user/assistant pairs.
    assert [len(messages) for messages in x.seen] == [4, 6, 8]
    assert x.seen[2][:6] == x.seen[1] and x.seen[2][6] == {"role": "assistant", "content": "1"}
    assert "You play tic-tac-toe as O" in o.seen[0][0]["content"] and "4|X|6" in o.seen[0][-1]["content"]
    assert (
        "free cells: 1, 2, 3, 4, 6, 7, 8, 9." in o.seen[0][-1]["content"]
        and "free cells: 2, 4, 6, 7, 8, 9." in o.seen[1][-1]["content"]
    )


def test_an_illegal_or_unparsable_reply_forfeits_the_game():
    record = asyncio.run(play_game(TicTacToe(), {"x": Scripted(["5", "5"]), "o": Scripted(["1", "2"])}))
    assert record.forfeit == "x" and record.winner == "o" and len(record.turns) == 3  # 5 was taken on X's second turn
    record = asyncio.run(play_game(TicTacToe(), {"x": Scripted(["middle please"]), "o": Scripted([])}))
    assert record.forfeit == "x" and record.winner == "o" and record.turns[0].reply == "middle please"
    with pytest.raises(ValueError, match="seats"):
        asyncio.run(play_game(TicTacToe(), {"x": Scripted([])}))


def test_turn_memory_shows_only_the_current_position():
    x = Scripted(["5", "1", "9"])
    asyncio.run(play_game(TicTacToe(), {"x": x, "o": Scripted(["3", "7"])}, memory="turn"))
    assert [len(messages) for messages in x.seen] == [4, 4, 4]


def test_the_lines_view_adds_columns_and_diagonals_and_the_example_can_be_left_out():
    assert Board.from_moves([1, 5, 3]).render_lines() == "Columns and diagonals:\nX|4|7;2|O|8;X|6|9;X|O|9;X|O|7"
    policy = Scripted(["5", "none"])  # the second reply forfeits: the game ends after the policy's second turn
    out = run_workflow(
        {"seed": 0, "side": "x", "workflow_args": {"opponent": "random", "memory": "turn", "board_view": "lines"}},
        policy,
    )
    example, first, second = (policy.seen[0][1]["content"], policy.seen[0][3]["content"], policy.seen[1][3]["content"])
    empty = (
        "1|2|3\n4|5|6\n7|8|9\nColumns and diagonals:\n1|4|7;2|5|8;3|6|9;1|5|9;3|5|7\nPick one of these free "
        "cells: 1, 2, 3, 4, 5, 6, 7, 8, 9."
    )
    assert example == first == empty
    after_two = Board.from_moves([move for _, move in out.response[:2]])
    assert (
        second == TicTacToe(view="lines").show(after_two) and second.count("X") == 4
    )  # X in the centre: its row, column, both diagonals
    bare = Scripted(["5", "none"])
    run_workflow(
        {"seed": 0, "side": "x", "workflow_args": {"opponent": "random", "memory": "turn", "example": False}}, bare
    )
    assert [m["role"] for m in bare.seen[0]] == ["system", "user"] and bare.seen[0][1]["content"] == TicTacToe().show(
        Board()
    )
    assert "Columns" not in bare.seen[0][1]["content"]
    with pytest.raises(ValueError, match="board_view.*'lines'.*'cube'"):
        run_workflow({"seed": 0, "workflow_args": {"board_view": "cube"}}, Scripted([]))


def test_bots_play_each_other_through_the_coordinator():
    rng = random.Random(1)
    for _ in range(20):
        bots = {"x": lambda game: random_move(game.board, rng), "o": lambda game: minimax_move(game.board, rng)}
        record = asyncio.run(play_game(TicTacToe(), bots))
        assert record.winner in (None, "o") and record.forfeit is None


def run_workflow(task, model, auxiliary_models=None):
    return asyncio.run(tictactoe(task, model, auxiliary_models or {}))


def test_self_play_rewards_both_seats_and_counts_illegal_moves():
    policy = Scripted(["5", "3", "1", "7", "9"])  # x: 5, 1, 9 wins the diagonal; o: 3, 7
    out = run_workflow({"seed": 0, "workflow_args": {"opponent": "self"}}, policy)
    assert out.reward == {"x": 1.0, "o": -1.0}
    assert out.metrics["agent/x/win_rate"] == 1.0 and out.metrics["agent/o/win_rate"] == 0.0
    assert (
        out.metrics["role/player/win_rate"] == out.metrics["win_rate"] == 0.5
        and out.metrics["invalid_action_rate"] == 0.0
    )
    out = run_workflow({"seed": 0, "workflow_args": {"illegal_reward": -2.0}}, Scripted(["5", "5"]))
    assert (
        out.reward == {"x": 1.0, "o": -2.0}
        and out.metrics["invalid_action_rate"] == 0.5
        and out.metrics["forfeit_rate"] == 1.0
    )


def test_against_bots_only_the_policy_side_is_rewarded():
    lowest_free = Scripted(["1 2 3 4 5 6 7 8 9"] * 5)
    out = run_workflow(
        {"seed": 1, "side": "x", "workflow_args": {"opponent": "minimax", "draw_reward": 0.25}}, lowest_free
    )
    assert set(out.reward) == {"x"} and out.reward["x"] in (0.25, -1.0) and out.metrics["invalid_action_rate"] == 0.0
    assert out.metrics["vs_minimax/win_rate"] == 0.0 and "agent/o/win_rate" not in out.metrics
    out = run_workflow({"seed": 3, "side": "o", "workflow_args": {"opponent": "random"}}, Scripted(["nothing"]))
    assert out.reward == {"o": -1.0} and out.metrics["invalid_action_rate"] == 1.0 and out.metrics["loss_rate"] == 1.0


def test_an_auxiliary_model_can_be_the_opponent_and_bad_opponents_are_named():
    base = Scripted(["1", "2", "3", "4"])
    out = run_workflow(
        {"seed": 0, "side": "o", "workflow_args": {"opponent": "base"}}, Scripted(["5", "9", "8", "7"]), {"base": base}
    )
    assert out.reward == {"o": -1.0} and base.seen and out.metrics["vs_base/win_rate"] == 0.0  # X: 1, 2, 3 wins
    with pytest.raises(ValueError, match="unknown opponent 'league'.*minimax"):
        run_workflow({"seed": 0, "workflow_args": {"opponent": "league"}}, Scripted([]), {"base": base})
    with pytest.raises(ValueError, match="side"):
        run_workflow({"seed": 0, "side": "z", "workflow_args": {"opponent": "random"}}, Scripted([]))


def test_moves_are_constrained_to_the_free_cells_unless_free_text():
    asked = []

    @dataclass(eq=False)
    class Recording(Scripted):
        async def __call__(self, messages, tools=None, **sampling):
            asked.append(sampling.get("choices"))
            return await super().__call__(messages, tools, **sampling)

    run_workflow(
        {"seed": 0, "side": "x", "workflow_args": {"opponent": "minimax"}}, Recording(["1", "2", "3", "4", "6"])
    )
    assert asked[0] == [str(cell) for cell in range(1, 10)] and len(asked[1]) == 7  # X and O have each taken one cell
    asked.clear()
    run_workflow(
        {"seed": 0, "side": "x", "workflow_args": {"opponent": "minimax", "free_text": True}},
        Recording(["1", "2", "3", "4", "6"]),
    )
    assert set(asked) == {None}


def test_move_credit_rewards_taking_a_win_and_blocking_one():
    # x: 1, o: 4, x: 2, o: 3 (blocks 1-2-3), x: 5, o: 6 (nothing), x: 9 (takes the 1-5-9 win).
    out = run_workflow(
        {"seed": 0, "workflow_args": {"opponent": "self", "move_credit": 0.5}},
        Scripted(["1", "4", "2", "3", "5", "6", "9"]),
    )
    assert (
        out.turn_rewards == {"x": [0.0, 0.0, 0.0, 0.5], "o": [0.0, 0.5, 0.0]} and out.outcome is None
    )  # self-play: no single side
    out = run_workflow(
        {"seed": 0, "workflow_args": {"opponent": "self"}}, Scripted(["1", "4", "2", "3", "5", "6", "9"])
    )
    assert out.turn_rewards is None


def test_value_credit_charges_the_move_that_throws_the_draw():
    # o: 4 answers x's corner with an edge beside it, the one move of the game that gives value away (draw -> loss);
    # every later move is already in a decided game, so none of them gives anything away.
    moves = ["1", "4", "2", "3", "5", "6", "9"]
    out = run_workflow({"seed": 0, "workflow_args": {"opponent": "self", "value_credit": 0.5}}, Scripted(moves))
    assert out.turn_rewards == {"x": [0.0, 0.0, 0.0, 0.0], "o": [-0.5, 0.0, 0.0]}
    assert out.metrics["blunder_rate"] == pytest.approx(1 / 7)  # one of the 7 moves of both trained seats
    assert (
        out.metrics["missed_block_rate"] == pytest.approx(1 / 7) and out.metrics["missed_win_rate"] == 0.0
    )  # o: 6 leaves 8 and 9
    assert out.metrics["threat_rate"] == pytest.approx(3 / 7)  # o: 3 and o: 6 had a block to find, x: 9 a win
    # x: 1, o: 4, x: 2, o: 5 (leaves 3 open), x: 7 (passes up 3), o: 6 (takes 4-5-6).
    out = run_workflow({"seed": 0, "workflow_args": {"opponent": "self"}}, Scripted(["1", "4", "2", "5", "7", "6"]))
    assert out.metrics["missed_block_rate"] == out.metrics["missed_win_rate"] == pytest.approx(1 / 6)
    out = run_workflow(
        {"seed": 0, "workflow_args": {"opponent": "self", "move_credit": 0.5, "value_credit": 0.5}}, Scripted(moves)
    )
    assert out.turn_rewards == {"x": [0.0, 0.0, 0.0, 0.5], "o": [-0.5, 0.5, 0.0]}


def test_an_opening_starts_every_game_of_a_seed_from_the_same_perfectly_played_position():
    starts = {seed: opening_position(TicTacToeArgs(opening_plies=4), seed) for seed in range(40)}
    assert {9 - len(board.free()) for board in starts.values()} == {0, 1, 2, 3, 4}
    assert all(opening_position(TicTacToeArgs(opening_plies=4), seed) == board for seed, board in starts.items())
    for board in starts.values():  # a minimax opening gives nothing away: perfect play from there draws
        while not board.is_over():
            board = board.play(minimax_move(board, random.Random(0)))
        assert board.winner() is None
    assert opening_position(TicTacToeArgs(), 3) == Board()
    with pytest.raises(ValueError, match="workflow_args.opening_plies: Input should be less than or equal to 4"):
        run_workflow({"seed": 0, "workflow_args": {"opening_plies": 5}}, Scripted([]))
    with pytest.raises(ValueError, match=r"workflow_args.opening: Input should be 'minimax' or 'random' \(got 'book'"):
        run_workflow({"seed": 0, "workflow_args": {"opening_plies": 2, "opening": "book"}}, Scripted([]))


def test_the_policy_plays_on_from_the_opening_and_is_credited_there():
    args = {"opponent": "self", "opening_plies": 4, "value_credit": 1.0}
    starts = ((seed, opening_position(TicTacToeArgs(**args), seed)) for seed in range(100))
    seed, start = next((seed, board) for seed, board in starts if len(board.free()) == 6)
    policy = Scripted([str(cell) for cell in start.free()])  # both seats: the free cells in order
    out = run_workflow({"seed": seed, "workflow_args": args}, policy)
    assert policy.seen[0][-1]["content"].startswith(start.render())
    expected, board = {"x": [], "o": []}, start
    for reply in policy.replies[: len(policy.seen)]:
        expected[board.to_move.lower()].append(-float(value_given_away(board, int(reply))))
        board = board.play(int(reply))
    assert board.is_over() and out.turn_rewards == expected  # charged from the opening's position, not the empty board
    assert out.metrics["turns"] == len(policy.seen) <= 6  # the opening's 3 plies are nobody's turns


def test_value_given_away_is_zero_for_perfect_moves_only():
    board = Board.from_moves([1, 5, 9])  # O to move: a corner loses to the fork, an edge holds the draw
    assert {cell: value_given_away(board, cell) for cell in board.free()} == {2: 0, 3: 1, 4: 0, 6: 0, 7: 1, 8: 0}
    assert value_given_away(Board.from_moves([1, 4, 2, 5]), 7) == 2  # X could take 3 and win; 7 lets O win at 6


def test_chance_credit_charges_what_a_move_gives_away_against_random_play():
    board = Board.from_moves([1, 2, 3, 4, 6, 8, 7])  # O to move: 5 wins (2-5-8), 9 hands X the win at 5
    assert {cell: score_given_away_to_chance(board, cell) for cell in board.free()} == {5: 0.0, 9: 2.0}
    # On the empty board every move is perfect play (a draw), but a corner wins most often against a random mover.
    assert all(value_given_away(Board(), cell) == 0 for cell in range(1, 10))
    assert (
        score_given_away_to_chance(Board(), 1)
        == 0.0
        < score_given_away_to_chance(Board(), 5)
        < score_given_away_to_chance(Board(), 2)
        < 0.02
    )
    moves = ["1", "4", "2", "3", "5", "6", "9"]
    out = run_workflow({"seed": 0, "workflow_args": {"opponent": "self", "chance_credit": 0.5}}, Scripted(moves))
    expected, board = {"x": [], "o": []}, Board()
    for move in map(int, moves):
        expected[board.to_move.lower()].append(-0.5 * score_given_away_to_chance(board, move))
        board = board.play(move)
    assert out.turn_rewards == expected and expected["o"][0] < 0  # o's 4 beside x's corner gives score away


def test_a_league_opponent_is_played_by_name_and_the_outcome_reported():
    drawn = Scripted(
        ["1", "2", "3", "4"]
    )  # a league names its draw 'minimax' too: the auxiliary model wins over the bot
    out = run_workflow(
        {"seed": 0, "side": "o", "workflow_args": {"opponent": "minimax"}},
        Scripted(["5", "9", "8", "7"]),
        {"minimax": drawn},
    )
    assert drawn.seen and out.outcome == "loss" and out.reward == {"o": -1.0}


def test_a_puzzle_is_one_move_from_its_position_rewarded_when_perfect():
    position = Board.from_moves([1, 4, 2, 5]).compact()  # X to move: 3 wins, 6 only blocks
    for reply, reward in (("3", 1.0), ("6", 0.0)):
        player = Scripted([reply])
        out = run_workflow({"puzzle": position, "workflow_args": {"opponent": "minimax"}}, player)
        assert out.reward == {"x": reward} and out.metrics == {"puzzle_solved_rate": reward, "invalid_action_rate": 0.0}
        assert (
            len(player.seen) == 1 and "1|2|3" in player.seen[0][1]["content"]
        )  # the worked example, then the position
        assert (
            player.seen[0][-1]["content"] == TicTacToe(Board.from_compact(position)).prompt("x") and out.outcome is None
        )
    out = run_workflow(
        {"puzzle": position, "workflow_args": {"free_text": True, "illegal_reward": -0.5}}, Scripted(["pass"])
    )
    assert out.reward == {"x": -0.5} and out.metrics["invalid_action_rate"] == 1.0
    with pytest.raises(ValueError, match="9 characters"):
        run_workflow({"puzzle": "XX"}, Scripted(["1"]))
    with pytest.raises(ValueError, match="finished game"):
        run_workflow({"puzzle": Board.from_moves([1, 4, 2, 5, 3]).compact()}, Scripted(["6"]))


def test_puzzles_hold_out_the_positions_the_supervised_benchmark_scores():
    train, held_out = make_puzzles("train", 2524, seed=3), make_puzzles("eval", 200, seed=5)
    assert {task["puzzle"] for task in held_out} == {
        board.compact() for board in hold_out(tactical_positions(), 200, seed=0)[1]
    }
    assert len({task["puzzle"] for task in train}) == 2524 and not {task["puzzle"] for task in train} & {
        task["puzzle"] for task in held_out
    }
    assert all(task["league"] is False and is_tactical(Board.from_compact(task["puzzle"])) for task in train + held_out)
    folder = Path(sparring.envs.tictactoe.__file__).parent / "data"
    shipped = {
        name: [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines()]
        for name in ("train", "puzzles", "puzzles_eval", "games_and_puzzles")
    }
    assert shipped["puzzles"] == train and shipped["puzzles_eval"] == held_out  # the shipped files are these calls
    assert shipped["games_and_puzzles"] == shipped["train"] + train[:512]
    with pytest.raises(ValueError, match="has 200 puzzles"):
        make_puzzles("eval", 201, seed=5)


def test_teaching_moves_are_the_perfect_moves_that_win_at_once_or_most_often_against_random_play():
    assert teaching_moves(Board()) == [1, 3, 7, 9]  # every cell draws; a corner wins most often against a random mover
    slow_and_quick = Board.from_moves(
        [1, 4, 2, 5, 9]
    )  # O to move: 6 wins at once; blocking 3 keeps a slower forced win
    assert best_moves(slow_and_quick) == [3, 6] and teaching_moves(slow_and_quick) == [6]
    for board in tactical_positions()[::50]:
        taught = teaching_moves(board)
        assert taught and set(taught) <= set(best_moves(board))
        wins = completing_cells(board, board.to_move)
        assert not wins or taught == sorted(wins)


def test_move_examples_are_the_puzzles_chats_answered_with_their_teaching_moves():
    puzzles, examples = make_puzzles("train", 2524, seed=3), make_move_examples("train", 2524, seed=3)
    shipped = (Path(sparring.envs.tictactoe.__file__).parent / "data" / "move_examples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in shipped] == examples  # the shipped file is this call
    remaining = iter(examples)
    for puzzle in puzzles:  # each puzzle's examples in turn: one per teaching move, weights summing to 1
        board = Board.from_compact(puzzle["puzzle"])
        answered = [next(remaining) for _ in teaching_moves(board)]
        assert sorted(int(e["messages"][-1]["content"]) for e in answered) == teaching_moves(board)
        assert sum(e["weight"] for e in answered) == pytest.approx(1.0)
        if (
            len(answered) == 1 and puzzle in puzzles[:30]
        ):  # the chat is what the puzzle episode shows; its reply solves it
            *chat, reply = answered[0]["messages"]
            player = Scripted([reply["content"]])
            assert run_workflow(puzzle, player).reward == {board.to_move.lower(): 1.0} and player.seen[0] == chat
    assert next(remaining, None) is None


def test_make_tasks_alternates_sides_and_differs_by_seed():
    tasks = make_tasks("train", 4, seed=1)
    assert [t["side"] for t in tasks] == ["x", "o", "x", "o"]
    assert [t["seed"] for t in tasks] != [t["seed"] for t in make_tasks("eval", 4, seed=2)]


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
        algorithm=AlgorithmConfig(
            group_size=2,
            batch_size=2,
            learning_rate=1e-3,
            eval_interval_steps=2,
            episode_timeout_s=60,
            allow_nothing_trained=True,
        ),
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


def test_random_against_random_matches_the_known_odds():
    """X wins about 58.5 % of random games, O 28.8 %: a check that the rules and turn order are right."""
    rng = random.Random(7)
    outcomes = []
    for _ in range(3000):
        board = Board()
        while not board.is_over():
            board = board.play(random_move(board, rng))
        outcomes.append(board.winner())
    counts = {mark: outcomes.count(mark) / len(outcomes) for mark in ("X", "O", None)}
    assert counts["X"] == pytest.approx(0.585, abs=0.03) and counts["O"] == pytest.approx(0.288, abs=0.03)


def test_every_reachable_position_renders_its_free_cells():
    for moves in itertools.permutations(range(1, 10), 3):
        board = Board.from_moves(list(moves))
        shown = board.render().replace("\n", "|").split("|")
        assert [int(c) for c in shown if c.isdigit()] == board.free()


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


def test_the_supervised_ceiling_trains_on_the_perfect_moves_and_saves_adapters(tiny_model_dir, tmp_path):
    script = load_benchmark("tictactoe_supervised")
    found_x = script.positions_against_perfect_play("X")
    for mark, count in (("X", 417), ("O", 451)):
        found = script.positions_against_perfect_play(mark)
        assert len(found) == count and all(board.to_move == mark and not board.is_over() for board in found)
    assert (
        Board.from_moves([1, 5]) in found_x and Board.from_moves([1, 2]) not in found_x
    )  # minimax never answers a corner at the edge
    renderer = get_renderer(AutoTokenizer.from_pretrained(tiny_model_dir))
    perfect_play = script.POSITIONS["perfect-play"]()
    data = script.perfect_move_data(renderer, perfect_play)
    assert len(data) == 1597 and sum(sum(d.loss_fn_inputs["weights"].tolist()) for d in data) == pytest.approx(
        417 + 451
    )
    for datum in data:  # the weighted target is the move, a cell number, at the prompt's end
        weighted = [
            token
            for token, weight in zip(
                datum.loss_fn_inputs["target_tokens"].tolist(), datum.loss_fn_inputs["weights"].tolist(), strict=True
            )
            if weight
        ]
        assert renderer.decode(weighted) in {str(cell) for cell in range(1, 10)}
    lines = script.perfect_move_data(renderer, perfect_play, "lines", example=False)
    assert len(lines) == len(data) and "Columns and diagonals" in renderer.decode(lines[0].model_input.to_ints())
    assert len(lines[0].model_input.to_ints()) < len(data[0].model_input.to_ints())  # no example: a shorter prompt
    threats = tactical_positions()
    assert len(threats) == len(set(threats)) == 2724
    for board in threats:  # a line to complete or block, and a wrong move to make
        assert completing_cells(board, board.to_move) | completing_cells(board, board.waiting)
        assert not board.is_over() and set(best_moves(board)) < set(board.free())
    assert Board.from_moves([1, 5, 2]) in threats and Board.from_moves([1, 5]) not in threats
    uniform, floor = script.reference_losses([Board.from_moves([1, 5, 2]), Board.from_moves([5, 1, 9])])
    assert uniform == pytest.approx(math.log(6)) and floor == pytest.approx(
        math.log(2) / 2
    )  # o blocks at 3; after 5, 1, 9: 3 or 7
    args = dict(
        model=str(tiny_model_dir), rank=4, seed=0, learning_rate=1e-3, batch=512, minutes=[0], out=str(tmp_path)
    )
    asyncio.run(
        script.train(
            argparse.Namespace(
                **args, board_view="lines", no_example=True, positions="perfect-play", held_out=0, held_out_every=50
            )
        )
    )
    assert (tmp_path / "minute-0" / "adapter_config.json").exists()


def test_the_tactic_bound_rises_with_tactical_accuracy_to_perfect_play():
    script = load_benchmark("tictactoe_tactics")
    assert is_tactical(Board.from_moves([1, 5, 2])) and not is_tactical(Board.from_moves([1, 5]))
    wins = [script.tactic_bound(accuracy, "random") for accuracy in (0.0, 0.5, 0.7, 0.8, 1.0)]
    non_losses = [script.tactic_bound(accuracy, "minimax") for accuracy in (0.0, 0.5, 1.0)]
    assert wins == sorted(wins) and non_losses == sorted(non_losses)
    assert (
        non_losses[-1] == pytest.approx(1.0) and wins[-1] > 0.9
    )  # perfect tactics and play: never lose, win more than minimax
    assert wins[2] < 0.80 < wins[3]  # the 0.80 against the random mover needs tactics right > 70 % of the time


def test_the_supervised_benchmark_keeps_held_out_positions_out_of_training(tiny_model_dir, tmp_path, capsys):
    script = load_benchmark("tictactoe_supervised")
    args = dict(model=str(tiny_model_dir), rank=4, seed=0, learning_rate=1e-3, batch=64, minutes=[0], out=str(tmp_path))
    asyncio.run(
        script.train(
            argparse.Namespace(
                **args, board_view="grid", no_example=True, positions="threats", held_out=20, held_out_every=1
            )
        )
    )
    printed = capsys.readouterr().out
    assert "2704 positions" in printed and "20 held-out positions: uniform over the free cells" in printed
    pattern = r"held-out loss/position ([\d.]+), perfect move ([\d.]+) sampled, ([\d.]+) greedy"
    scores = [tuple(map(float, found.groups())) for found in re.finditer(pattern, printed)]
    assert (
        len(scores) == 2
        and scores[0] != scores[1]
        and all(0 < sampled < 1 and 0 <= greedy <= 1 for _, sampled, greedy in scores)
    )
    asyncio.run(
        script.score(
            argparse.Namespace(
                **args,
                board_view="grid",
                no_example=True,
                positions="threats",
                held_out=20,
                score=["untrained", str(tmp_path / "minute-0")],
            )
        )
    )
    printed = (
        capsys.readouterr().out
    )  # the saved adapter scores as it did when its training stopped; untrained as at step 0
    rescored = [tuple(map(float, found.groups())) for found in re.finditer(pattern, printed)]
    assert len(rescored) == 2 and all(
        got == pytest.approx(trained, abs=2e-3) for got, trained in zip(rescored, scores, strict=True)
    )
    client = ServiceClient().create_lora_training_client(base_model=str(tiny_model_dir), rank=4, seed=0)
    boards = tactical_positions()[:5]
    scores = asyncio.run(script.held_out_scores(client, client.get_renderer(), boards, "grid", True))
    perfect_moves_loss = client.forward(
        script.perfect_move_data(client.get_renderer(), boards), "cross_entropy"
    ).result().loss / len(boards)
    assert scores.loss == pytest.approx(
        perfect_moves_loss, rel=1e-4
    )  # the same cross-entropy, from every free cell's logprob
    assert scores.perfect_greedy in {share / 5 for share in range(6)}
