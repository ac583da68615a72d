"""What the tactics of tic-tac-toe are worth, and how often a training run found them.

A *tactical* position is one where the mover can complete a line or has to block one, and some free cell is not a
perfect move (so there is something to get wrong). Two questions about the targets of docs/results.md:

- `bound`: the best a policy can score whose tactics are right only a share q of the time: a perfect move there
  with probability q (uniform among them), otherwise a uniformly drawn other free cell, and everywhere else the
  move that maximises the column's score (wins against the random mover, non-losses against minimax). Computed
  exactly over the game tree, both seats averaged: an upper bound for any policy with that tactical accuracy.
- `rollouts RUN`: the tactical positions the trained side met in a run's training rollouts
  (`RUN/rollouts/step_N.jsonl`, grid view), per window of steps, with the share it played a perfect move and
  the share a uniform choice among the free cells would have.

    python benchmarks/tictactoe_tactics.py bound
    python benchmarks/tictactoe_tactics.py rollouts runs/tictactoe --window 20
"""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from sparring.algorithms.intervals import wilson_interval
from sparring.envs.tictactoe.rules import Board, best_moves, is_tactical
from sparring.logging import read_rollouts
from sparring.logging.report import one_based

_GRID = re.compile(
    r"([XO1-9])\|([XO1-9])\|([XO1-9])\n([XO1-9])\|([XO1-9])\|([XO1-9])\n([XO1-9])\|([XO1-9])\|([XO1-9])\n"
)


def tactic_bound(accuracy: float, opponent: str) -> float:
    """The best win rate against `opponent` "random" or non-loss rate against "minimax" (uniform among its perfect
    moves) of a policy whose tactical moves are perfect with probability `accuracy`, both seats averaged."""

    @functools.cache
    def score(cells: tuple[str, ...], seat: str) -> float:
        board = Board(cells)
        if board.winner() is not None:
            return float(board.winner() == seat)
        if not board.free():
            return float(opponent == "minimax")  # a draw is a non-loss, not a win
        after = {cell: score(board.play(cell).cells, seat) for cell in board.free()}
        if board.to_move != seat:
            replies = board.free() if opponent == "random" else best_moves(board)
            return sum(after[cell] for cell in replies) / len(replies)
        if not is_tactical(board):
            return max(after.values())
        best = best_moves(board)
        others = [cell for cell in board.free() if cell not in best]
        return accuracy * sum(after[cell] for cell in best) / len(best) + (1 - accuracy) * sum(
            after[cell] for cell in others
        ) / len(others)

    return (score(Board().cells, "X") + score(Board().cells, "O")) / 2


@dataclass
class TacticWindow:
    """The trained side's tactical positions in a window of training steps."""

    first_step: int
    """The window's first step (it spans `--window` steps)."""
    moves: int = 0
    """Every move the trained side made in the window."""
    tactical: int = 0
    """Those made in a tactical position."""
    perfect: int = 0
    """Those of them that were perfect moves."""
    uniform: float = 0.0
    """The perfect moves a uniform choice among the free cells would have made there (expected count)."""


def tactics_in_rollouts(run_dir: Path, window: int) -> list[TacticWindow]:
    """Per window of `window` steps, the tactical positions the trained side met in `run_dir`'s rollouts."""
    windows: dict[int, TacticWindow] = {}
    files = {int(path.stem.split("_")[1]): path for path in (run_dir / "rollouts").glob("step_*.jsonl")}
    steps = one_based(sorted(files))  # steps from 1, older runs' step_0 files too
    for number, step in sorted(steps.items(), key=lambda item: item[1]):
        path, index = files[number], (step - 1) // window
        counts = windows.setdefault(index, TacticWindow(first_step=index * window + 1))
        for row in read_rollouts(path):
            if "completions" not in row:
                continue  # a scripted opponent's turns
            board = Board(tuple(cell if cell in "XO" else "" for cell in _GRID.findall(row["text"])[-1]))
            move = int(row["completions"][-1].replace("<|im_end|>", "").strip())
            counts.moves += 1
            if is_tactical(board):
                best = best_moves(board)
                counts.tactical += 1
                counts.perfect += move in best
                counts.uniform += len(best) / len(board.free())
    return [windows[key] for key in sorted(windows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bound", help="the best score for each tactical accuracy")
    rollouts = commands.add_parser("rollouts", help="tactical positions met in a run's training rollouts")
    rollouts.add_argument("run_dir", type=Path)
    rollouts.add_argument("--window", type=int, default=20, help="steps a row")
    args = parser.parse_args()
    if args.command == "bound":
        print("| tactical accuracy | best win rate vs random_legal | best non-loss vs minimax |\n|---|---|---|")
        for accuracy in (0.0, 0.3, 0.4, 0.45, 0.5, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0):
            print(
                f"| {accuracy:.2f} | {tactic_bound(accuracy, 'random'):.3f} | {tactic_bound(accuracy, 'minimax'):.3f} |"
            )
        return
    print("| steps | moves | tactical positions | perfect there | uniform over the free cells |\n|---|---|---|---|---|")
    for counts in tactics_in_rollouts(args.run_dir, args.window):
        low, high = wilson_interval(counts.perfect, counts.tactical)
        share = counts.perfect / counts.tactical
        print(
            f"| {counts.first_step}-{counts.first_step + args.window - 1} | {counts.moves} | "
            f"{counts.tactical} | {share:.2f} [{low:.2f}, {high:.2f}] | "
            f"{counts.uniform / counts.tactical:.2f} |"
        )


if __name__ == "__main__":
    main()
