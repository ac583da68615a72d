"""Guess the number: the policy guesses, a Python referee answers "too high" / "too low".

The game's folder: `workflow.py` (the episode), `rules.py` (referee and
score), `baselines.py` (scripted players), `tasks.py` (`make_tasks`),
`config.yaml` (the default job: `sparring train guess_number`) and `data/`.
"""

from .baselines import binary_search, random_valid
from .tasks import make_tasks
from .workflow import GuessNumberArgs, guess_number

__all__ = ["GuessNumberArgs", "binary_search", "guess_number", "make_tasks", "random_valid"]
