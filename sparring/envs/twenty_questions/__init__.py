"""Twenty questions: the policy asks yes/no questions, a frozen LLM that knows the secret word answers.

The game's folder: `workflow.py` (the episode), `rules.py` (the referee, the
word list and the score), `baselines.py` (the halving asker and a truthful
answerer), `tasks.py` (`make_tasks`), `config.yaml` (the default job:
`sparring train twenty_questions`) and `data/` (the words and task files).
"""

from .baselines import halving_asker, membership_answerer
from .tasks import make_tasks
from .workflow import TwentyQuestionsArgs, twenty_questions

__all__ = ["TwentyQuestionsArgs", "halving_asker", "make_tasks", "membership_answerer", "twenty_questions"]
