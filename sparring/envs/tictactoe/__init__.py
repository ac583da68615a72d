"""Tic-tac-toe: self-play, or the policy against a scripted or frozen opponent.

The game's folder: `workflow.py` (the episode and its opponents), `rules.py`
(the board and the scripted movers), `baselines.py` (scripted players for the
policy's seat), `tasks.py` (`make_tasks`; `make_puzzles`: one-move tactical positions; `make_move_examples`: their
answers, for a warm start), `config.yaml` (the default job, a league: `sparring train tictactoe`) and `data/`.
"""

from .baselines import fallible_minimax, minimax, random_legal
from .tasks import make_move_examples, make_puzzles, make_tasks
from .workflow import TicTacToe, TicTacToeArgs, tictactoe

__all__ = [
    "TicTacToe",
    "TicTacToeArgs",
    "fallible_minimax",
    "make_move_examples",
    "make_puzzles",
    "make_tasks",
    "minimax",
    "random_legal",
    "tictactoe",
]
