"""Tic-tac-toe's tasks: games (seeds drawn from a seed, sides alternating) and puzzles (one tactical position each),
and the puzzles' answers as supervised examples (`make_move_examples`, for a run's `warm_start:`).

Both follow the `make_tasks` contract of `envs.common.tasks`. A game task is a seed and the policy's side. A
puzzle task is a position to make one move in (`puzzle`, `Board.compact`'s text), marked `"league": false` so a
league draws it no opponent; its `eval` split is a fixed list of 200 tactical positions that the `train` split
never contains (the ones `benchmarks/tictactoe_supervised.py --positions threats --held-out 200` scores).
"""

from __future__ import annotations

import random
from typing import TypeVar

from ..common import check_split
from .rules import Board, tactical_positions, teaching_moves
from .workflow import PUZZLE_KEY, SEATS, TicTacToe

HELD_OUT_PUZZLES = 200
"""Tactical positions kept for evaluation (drawn by `hold_out` with seed 0 from `tactical_positions()`)."""
Item = TypeVar("Item")


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """`count` games with seeds drawn from `seed`; the policy's side alternates X, O, X, ...; `split` is checked,
    the seed decides.

    The shipped files: data/train.jsonl is make_tasks("train", 256, seed=1), data/eval.jsonl make_tasks("eval", 200,
    seed=2),
    data/league.jsonl make_tasks("train", 255, seed=4) with workflow_args.opponent cycling snapshot, random, minimax.
    """
    check_split(split)
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "seed": rng.randrange(2**31), "side": SEATS[i % 2]} for i in range(count)]


def hold_out(items: list[Item], count: int, seed: int) -> tuple[list[Item], list[Item]]:
    """(the rest in their order, `count` items drawn from `seed`): a held-out split that any script can redraw."""
    held_out = random.Random(seed).sample(items, count)
    kept_out = set(held_out)
    return [item for item in items if item not in kept_out], held_out


def make_puzzles(split: str, count: int, seed: int) -> list[dict]:
    """`count` puzzles of `split` in an order drawn from `seed`: 'train' draws from the 2,524 tactical positions
    outside the held-out 200, 'eval' from those 200.

    The shipped files: data/puzzles.jsonl is make_puzzles("train", 2524, seed=3), data/puzzles_eval.jsonl
    make_puzzles("eval", 200, seed=5); data/games_and_puzzles.jsonl is data/train.jsonl's 256 games and the first
    512 puzzles of data/puzzles.jsonl.
    """
    check_split(split)
    train, held_out = hold_out(tactical_positions(), HELD_OUT_PUZZLES, seed=0)
    pool = train if split == "train" else held_out
    if not 0 <= count <= len(pool):
        raise ValueError(f"the {split} split has {len(pool)} puzzles, asked for {count}")
    rng = random.Random(seed)
    return [
        {"task_id": f"puzzle-{seed}-{i}", "seed": rng.randrange(2**31), PUZZLE_KEY: board.compact(), "league": False}
        for i, board in enumerate(rng.sample(pool, count))
    ]


def make_move_examples(split: str, count: int, seed: int) -> list[dict]:
    """`make_puzzles(split, count, seed)` answered: per puzzle, the chat the game shows its mover there (system prompt,
    worked example, board), ending in one of its `teaching_moves` (the win at once where there is one, not a slower
    forced win; else the perfect moves that win most often against a random mover); one example per such move,
    weighted 1 / their number, so a position weighs 1 whatever its answers (`warm_start:`'s example format).

    The shipped file: data/move_examples.jsonl is make_move_examples("train", 2524, seed=3) (data/puzzles.jsonl's
    positions).
    """
    examples = []
    for puzzle in make_puzzles(split, count, seed):
        board = Board.from_compact(puzzle[PUZZLE_KEY])
        game, seat, taught = TicTacToe(board), board.to_move.lower(), teaching_moves(board)
        examples += [
            {"messages": [*game.chat(seat), {"role": "assistant", "content": str(cell)}], "weight": 1 / len(taught)}
            for cell in taught
        ]
    return examples
