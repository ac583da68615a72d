"""Tic-tac-toe's baselines: scripted players for the trainable slot (`baselines:` in a config).

Each (and the league opponent `fallible_minimax`) is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
`ScriptedChatModel`): it reads the position from the board drawn in the last
prompt (`Board.render`'s drawing) and answers with a cell number.
"""

from __future__ import annotations

import random
import re

from .rules import MARKS, Board, minimax_move, random_move

_BOARD_ROW = re.compile(r"^([XO1-9])\|([XO1-9])\|([XO1-9])$")


def read_board(text: str) -> Board:
    """The position drawn in a prompt (the last three-row board in `text`, as `Board.render` draws it)."""
    rows = [match.groups() for match in map(_BOARD_ROW.match, text.splitlines()) if match]
    if len(rows) < 3:
        raise ValueError(f"no tic-tac-toe board in {text!r}")
    cells = tuple(cell if cell in MARKS else "" for row in rows[-3:] for cell in row)
    return Board(cells)


def _position(messages: list[dict]) -> Board:
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None:
        raise ValueError("the conversation has no user message showing the board")
    return read_board(last.get("content") or "")


def random_legal(messages: list[dict], rng: random.Random) -> str:
    """Baseline: a uniformly random free cell of the position shown."""
    return str(random_move(_position(messages), rng))


def minimax(messages: list[dict], rng: random.Random) -> str:
    """Baseline: perfect play (a random one among the best moves); it never loses."""
    return str(minimax_move(_position(messages), rng))


FALLIBLE_MISTAKE_RATE = 0.25
"""How often `fallible_minimax` moves at random: about one move a game, so it punishes most blunders and leaves wins."""


def fallible_minimax(messages: list[dict], rng: random.Random) -> str:
    """League opponent: perfect play, except a uniformly random free cell on `FALLIBLE_MISTAKE_RATE` of its moves.

    Against it a policy that never gives value away still wins some games and draws others, so a group of games
    keeps different outcomes after the policy turns deterministic, and it meets more positions than minimax's lines."""
    board = _position(messages)
    return str(random_move(board, rng) if rng.random() < FALLIBLE_MISTAKE_RATE else minimax_move(board, rng))
