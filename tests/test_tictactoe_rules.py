"""Tic-tac-toe's rules: the board, turns, wins and illegal moves, lenient move parsing, minimax, the known odds of
random play, and every reachable position's rendering."""

import itertools
import random

import pytest

from sparring.envs.tictactoe.rules import (
    Board,
    IllegalMove,
    best_moves,
    minimax_move,
    parse_move,
    random_move,
)


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
