"""Tic-tac-toe's baselines: scripted players for the trainable slot (`baselines:` in a config).

Each is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
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
