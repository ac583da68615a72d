"""Debate: two trainable models argue opposite sides of a motion; a frozen judge picks the winner.

The game's folder: `workflow.py` (the rounds and the rewards), `rules.py`
(the prompts and the judge's verdict), `tasks.py` (`make_tasks`),
`config.yaml` (the default job: `sparring train debate`) and `data/` (the
motions). No baselines: a scripted debater would argue both sides at once.
"""

from .tasks import make_tasks
from .workflow import Debate, DebateArgs

__all__ = ["Debate", "DebateArgs", "make_tasks"]
