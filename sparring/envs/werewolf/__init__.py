"""Werewolf: seven LLM players, one side trained, the other played by a frozen auxiliary model.

The game's folder: `workflow.py` (the seats and the rounds), `rules.py` (the
roles and how a night and a vote resolve), `baselines.py` (a scripted player),
`tasks.py` (`make_tasks`), `config.yaml` (the default job: `sparring train
werewolf`) and `data/`.
"""

from .baselines import coordinated_werewolves, random_valid
from .tasks import make_tasks
from .workflow import WerewolfArgs, werewolf

__all__ = ["WerewolfArgs", "coordinated_werewolves", "make_tasks", "random_valid", "werewolf"]
