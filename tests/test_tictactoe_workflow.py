"""The tic-tac-toe coordinator with scripted players (illegal input included) and the workflow's rewards, credits,
metrics, opponents and opening curriculum; the tasks it is given."""

import asyncio
import random
from dataclasses import dataclass

import pytest
from tictactoe_players import Scripted, run_workflow

from sparring.envs.common import play_game
from sparring.envs.tictactoe import (
    TicTacToe,
    make_tasks,
)
from sparring.envs.tictactoe.rules import (
    Board,
    minimax_move,
    random_move,
    score_given_away_to_chance,
    value_given_away,
)
from sparring.envs.tictactoe.workflow import TicTacToeArgs, opening_position


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


def test_make_tasks_alternates_sides_and_differs_by_seed():
    tasks = make_tasks("train", 4, seed=1)
    assert [t["side"] for t in tasks] == ["x", "o", "x", "o"]
    assert [t["seed"] for t in tasks] != [t["seed"] for t in make_tasks("eval", 4, seed=2)]
