"""`sparring new NAME`: a game of one's own in the shape of the packaged ones, ready to train.

`new_game` writes a folder `NAME/` holding what every packaged game folder
holds -- `workflow.py` (the episode), `rules.py` (prompt and score),
`tasks.py` (`make_tasks(split, count, seed)`), `baselines.py` (scripted
players), `config.yaml` (the job) and `data/` (train and eval tasks made by
`make_tasks`) -- as plain files to edit. Its workflow declares its
`workflow_args` as a typed record, as the packaged games do. The starter
game asks the model to repeat a word and scores the reply by its similarity
to the word, a reward with partial credit, so even an untrained model's
episodes differ and the first run trains (a reward of only 0 and 1 often
gives a small model nothing to compare). The config names the workflow,
baselines and data by files beside it (they resolve against its folder), so
it runs from any directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..trainer import ConfigError, import_object

TEMPLATES: dict[str, str] = {
    "workflow.py": '''"""{name}: the episode. The policy is asked to repeat a word; the reward is how close its reply
comes."""

from rules import PROMPT, score

from sparring import WorkflowArgs, WorkflowOutput, takes_args


class {record}(WorkflowArgs):
    """The game's `workflow_args` (config.yaml's `train_dataset.workflow_args`): one field per argument, with its
    type, default and what it does. A misspelt key or a wrong type is an error when the config loads."""

    exact_bonus: float = 0.0
    """Added to the reward of a reply that is the word exactly (0: the similarity alone)."""


@takes_args({record})
async def {name}(task, model, auxiliary_models):
    """One episode: one model call, scored by `rules.score` (edit both to make the game yours)."""
    args = {record}.of(task)
    reply = await model([{{"role": "user", "content": PROMPT.format(word=task["word"])}}])
    said = reply.content or ""
    exact = said.strip().lower() == task["word"]
    reward = score(said, task["word"]) + args.exact_bonus * exact
    return WorkflowOutput(reward=reward, metrics={{"exact": float(exact)}})
''',
    "rules.py": '''"""{name}'s rules: the prompt and the score (partial credit, so episodes differ and groups have
something to compare)."""

from difflib import SequenceMatcher

PROMPT = "Repeat this word exactly, and nothing else: {{word}}"


def score(reply: str, word: str) -> float:
    """How close `reply` is to `word`, from 0 (nothing alike) to 1 (the word itself)."""
    return SequenceMatcher(None, reply.strip().lower(), word).ratio()
''',
    "tasks.py": '''"""{name}'s tasks: words drawn from a seed (`make_tasks(split, count, seed)`, as every packaged game
has)."""

import random

WORDS = [
    "apple", "river", "stone", "cloud", "tiger", "piano", "lemon", "candle", "forest", "planet", "garden", "silver"
]


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """`count` tasks for `split` ('train' or 'eval') drawn from `seed`."""
    if split not in ("train", "eval"):
        raise ValueError(f"split {{split!r}}: use 'train' or 'eval'")
    rng = random.Random(seed)
    return [{{"task_id": f"{{split}}-{{i}}", "word": rng.choice(WORDS)}} for i in range(count)]
''',
    "baselines.py": '''"""{name}'s baselines: scripted players for the trainable slot, evaluated beside the model
(`baselines:` in config.yaml)."""

import random
import string

from rules import PROMPT

PREFIX = PROMPT.split("{{word}}")[0]


def echo(messages: list[dict], rng: random.Random) -> str:
    """The perfect player: says the word back."""
    return messages[-1]["content"].removeprefix(PREFIX).strip()


def random_letters(messages: list[dict], rng: random.Random) -> str:
    """Five random letters."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(5))
''',
    "config.yaml": """# {name}: a game of your own, made by `sparring new {name}`.
#   sparring run {folder}/config.yaml --tasks 2                     # episodes and transcripts, no training
#   sparring train {folder}/config.yaml --steps 2 --eval-tasks 8    # a short run
# Its paths (workflow, baselines, data) name files beside this config: it runs from any directory.
workflow: workflow.py:{name}
run_dir: runs/{name}
baselines:
  echo: baselines.py:echo
  random_letters: baselines.py:random_letters
model:
  model_path: smollm2-135m-instruct
  max_tokens: 8
  lora_rank: 8
algorithm:                     # the defaults, chosen on the learning suite (docs/learning-suite.md): 16 tasks x 4
  seed: 0                      # episodes a step, learning rate 3e-4, exploration 0.1 on constrained replies
train_dataset:
  path: data/train.jsonl
  total_steps: 8
  workflow_args: {{exact_bonus: 0.0}}   # workflow.py's {record}: a field there is a key here
eval_dataset:
  path: data/eval.jsonl
  shuffle: false
logging:
  tensorboard: false
""",
}
"""File name -> its text, with `{name}` (the game), `{record}` (its `WorkflowArgs` record) and `{folder}` (where it
is) filled in."""
TASK_FILES = {"train": ("train.jsonl", 64, 1), "eval": ("eval.jsonl", 16, 2)}
"""Split -> (file in data/, tasks, seed) that `new_game` writes with the new game's own `make_tasks`."""


def args_record_name(name: str) -> str:
    """The class name of game `name`'s `WorkflowArgs` record: 'echo_game' -> 'EchoGameArgs'."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "Args"


def new_game(name: str, parent: Path = Path(".")) -> Path:
    """Write game `name` into `parent/name/` (which must not hold anything yet); returns the folder."""
    if not name.isidentifier() or name.startswith("_"):
        raise ConfigError(
            f"game name {name!r}: use a Python name (letters, digits and '_', not starting with a digit or "
            "'_'); it names the workflow function"
        )
    folder = parent / name
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"{folder} exists and is not empty; choose another name or --dir")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for file_name, template in TEMPLATES.items():
        text = template.format(name=name, record=args_record_name(name), folder=folder.as_posix())
        (folder / file_name).write_text(text, encoding="utf-8")
    make_tasks = import_object(f"{folder / 'tasks.py'}:make_tasks")
    for split, (file_name, count, seed) in TASK_FILES.items():
        lines = "".join(json.dumps(task) + "\n" for task in make_tasks(split, count, seed))
        (folder / "data" / file_name).write_text(lines, encoding="utf-8")
    return folder
