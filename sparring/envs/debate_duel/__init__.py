"""The debate duel: the policy argues each motion from both sides against a frozen opponent, before a frozen judge.

The game's folder: `workflow.py` (the pair of debates and their rewards), `baselines.py` (a scripted debater),
`config.yaml` (the default job: `sparring train debate_duel`) and `data/` (the debate game's motions). The speeches
and the judge are the debate game's (`sparring.envs.debate.rules`), and so is `make_tasks`.
"""

from ..debate.tasks import make_tasks
from .baselines import restate
from .workflow import DebateDuelArgs, debate_duel

__all__ = ["DebateDuelArgs", "debate_duel", "make_tasks", "restate"]
