"""Tic-tac-toe rules in pure Python: the board, its text form, reply parsing and two scripted players.

`Board` is an immutable 3x3 position (cells numbered 1-9, row by row) that
knows whose turn it is, which cells are free and who has won. `render` draws
it the way a small model reads it best: occupied cells as X / O, free cells
as their own numbers, so a move is just one of the numbers it can see.
`parse_move` is lenient on purpose: the first number in a reply that names a
free cell is the move ("I take 5" and "5." both play 5).

The scripted opponents are `random_move` (uniform over free cells) and
`minimax_move` (perfect play: it never loses; among equally good moves it
picks one at random, so games against it still vary).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
MARKS = ("X", "O")
_NUMBER = re.compile(r"\d+")


class IllegalMove(ValueError):
    """A move on an occupied cell, outside 1-9, or after the game ended."""


@dataclass(frozen=True)
class Board:
    """A tic-tac-toe position."""

    cells: tuple[str, ...] = ("",) * 9
    """Nine cells, row by row: 'X', 'O' or '' (free)."""

    def __post_init__(self) -> None:
        if len(self.cells) != 9 or any(cell not in ("", *MARKS) for cell in self.cells):
            raise ValueError(f"a board is 9 cells of 'X', 'O' or '', got {self.cells!r}")

    @property
    def to_move(self) -> str:
        """'X' moves first; then the marks alternate."""
        return "X" if self.cells.count("X") == self.cells.count("O") else "O"

    @property
    def waiting(self) -> str:
        """The mark not to move: the side whose lines the mover has to block."""
        return "O" if self.to_move == "X" else "X"

    def free(self) -> list[int]:
        """Free cell numbers (1-9), ascending."""
        return [index + 1 for index, cell in enumerate(self.cells) if not cell]

    def winner(self) -> str | None:
        """The mark with three in a row, if any."""
        for a, b, c in LINES:
            if self.cells[a] and self.cells[a] == self.cells[b] == self.cells[c]:
                return self.cells[a]
        return None

    def is_over(self) -> bool:
        return self.winner() is not None or not self.free()

    def play(self, cell: int) -> Board:
        """The board after the player to move marks `cell` (1-9)."""
        if self.is_over():
            raise IllegalMove(f"the game is over; cell {cell} cannot be played")
        if cell not in self.free():
            raise IllegalMove(f"cell {cell} is not free; free cells are {self.free()}")
        cells = list(self.cells)
        cells[cell - 1] = self.to_move
        return Board(tuple(cells))

    def render(self) -> str:
        """Three rows like 'X|2|O': marks where played, the cell's number where free."""
        shown = self._shown()
        return "\n".join("|".join(shown[i] for i in row) for row in LINES[:3])

    def render_lines(self) -> str:
        """The columns and diagonals, each as its three cells shown as in `render` ('X|4|7;2|O|8;...'): two marks
        of one side on a column or a diagonal then sit in adjacent tokens, as they do on a row of the grid."""
        shown = self._shown()
        return "Columns and diagonals:\n" + ";".join("|".join(shown[i] for i in line) for line in LINES[3:])

    def _shown(self) -> list[str]:
        """Each cell as drawn: its mark, or its number while free."""
        return [cell or str(index + 1) for index, cell in enumerate(self.cells)]

    def compact(self) -> str:
        """The nine cells as one string, row by row, '.' for a free cell ('X.O.X....'): a position in a task file."""
        return "".join(cell or "." for cell in self.cells)

    @classmethod
    def from_compact(cls, text: str) -> Board:
        """The board `compact` wrote; ValueError naming the text otherwise."""
        if len(text) != 9 or set(text) - {".", *MARKS}:
            raise ValueError(f"a position is 9 characters of 'X', 'O' or '.' (row by row), got {text!r}")
        return cls(tuple("" if cell == "." else cell for cell in text))

    @classmethod
    def from_moves(cls, cells: list[int]) -> Board:
        """The board after playing `cells` in order from the empty board."""
        board = cls()
        for cell in cells:
            board = board.play(cell)
        return board


def parse_move(text: str, board: Board) -> int | None:
    """The first number in `text` that is a free cell of `board`; None when there is none."""
    free = board.free()
    for match in _NUMBER.finditer(text):
        value = int(match.group())
        if value in free:
            return value
    return None


def completing_cells(board: Board, mark: str) -> set[int]:
    """The free cells (1-9) that would complete a line of `mark`: a win for it, a block against it."""
    return {
        cell + 1
        for line in LINES
        if sorted(board.cells[i] for i in line) == sorted(("", mark, mark))
        for cell in line
        if not board.cells[cell]
    }


def tactic_cells(board: Board) -> set[int]:
    """The free cells that complete a line of either side: the mover's wins and its blocks."""
    return completing_cells(board, board.to_move) | completing_cells(board, board.waiting)


def is_tactical(board: Board) -> bool:
    """A line to complete or block, and a free cell that is not a perfect move: a tactic there can be missed."""
    return bool(tactic_cells(board)) and len(best_moves(board)) < len(board.free())


def reached(moves, keep) -> list[Board]:
    """Every position (game not over) that playing `moves(board)` from the empty board reaches and `keep` accepts,
    in a fixed order."""
    seen, stack, found = set(), [Board()], []
    while stack:
        board = stack.pop()
        if board.cells in seen or board.is_over():
            continue
        seen.add(board.cells)
        if keep(board):
            found.append(board)
        stack += [board.play(cell) for cell in moves(board)]
    return found


def tactical_positions() -> list[Board]:
    """Every position legal play reaches that `is_tactical` (2,724 of them), in a fixed order: the puzzles."""
    return reached(Board.free, is_tactical)


def random_move(board: Board, rng: random.Random) -> int:
    return rng.choice(board.free())


def minimax_move(board: Board, rng: random.Random) -> int:
    """A perfect move for the player to move, chosen at random among the perfect ones."""
    return rng.choice(best_moves(board))


def best_moves(board: Board) -> list[int]:
    """Every free cell whose game value (perfect play after it) is the best available to the mover."""
    values = {cell: -_value(board.play(cell).cells) for cell in board.free()}
    best = max(values.values())
    return [cell for cell, value in values.items() if value == best]


def teaching_moves(board: Board) -> list[int]:
    """The perfect moves a teacher shows: the cells that win at once where the mover can complete a line, else the
    perfect moves that score best against a random mover. `best_moves` ranks a slow forced win with the quick one and
    a drawing edge with a drawing corner; an imitator learns the simplest of them, the one that wins most often."""
    wins = completing_cells(board, board.to_move)
    if wins:
        return sorted(wins)
    scores = {cell: _score_after_move(board.play(cell).cells) for cell in best_moves(board)}
    top = max(scores.values())
    return sorted(cell for cell, score in scores.items() if score > top - 1e-9)  # symmetric cells tie up to rounding


def value_given_away(board: Board, cell: int) -> int:
    """How much game value (perfect play after it: +1 win, 0 draw, -1 loss) playing `cell` gives away against the
    best move available: 0 for a perfect move, 1 for a drawn game thrown or a win turned into a draw, 2 for a won
    game turned into a loss."""
    best = max(-_value(board.play(free).cells) for free in board.free())
    return best + _value(board.play(cell).cells)


def score_given_away_to_chance(board: Board, cell: int) -> float:
    """How much expected score (+1 win, 0 draw, -1 loss) playing `cell` gives away against a uniformly random
    opponent, the mover playing on to maximise it: 0 for the best move against random play, up to 2. Where
    `value_given_away` asks only whether a move is safe against perfect play, this also asks how often it wins."""
    scores = {free: _score_after_move(board.play(free).cells) for free in board.free()}
    return max(scores.values()) - scores[cell]


@functools.cache
def _score_against_chance(cells: tuple[str, ...]) -> float:
    """Expected score of the player to move (the game not over) when it maximises it and the other side moves at
    random."""
    board = Board(cells)
    return max(_score_after_move(board.play(cell).cells) for cell in board.free())


@functools.cache
def _score_after_move(cells: tuple[str, ...]) -> float:
    """Expected score of the player who just moved, the random side to move next."""
    board = Board(cells)
    if board.winner() is not None:
        return 1.0
    if not board.free():
        return 0.0
    replies = [board.play(cell) for cell in board.free()]
    return sum(
        -1.0 if reply.winner() is not None else 0.0 if not reply.free() else _score_against_chance(reply.cells)
        for reply in replies
    ) / len(replies)


@functools.cache
def _value(cells: tuple[str, ...]) -> int:
    """+1 if the player to move wins with perfect play, 0 for a draw, -1 for a loss."""
    board = Board(cells)
    if board.winner() is not None:
        return -1  # the previous mover completed a line
    if not board.free():
        return 0
    return max(-_value(board.play(cell).cells) for cell in board.free())
